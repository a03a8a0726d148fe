//! Freed memory given back to the system after a reload.
//!
//! glibc's allocator keeps the pages a large configuration used once it is
//! freed, in each thread's arena, for later allocations: after going from
//! 10,000 routes back to two, the process stayed at its peak (89 MiB PSS,
//! BENCHMARKS.md). `malloc_trim(0)` returns the free pages of every arena.

/// Returns the allocator's free pages to the system (glibc; a no-op on
/// other C libraries, whose allocators return memory on their own terms).
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` has no preconditions: it takes each arena's
    // own lock, touches only memory the allocator owns and already counts
    // as free, and glibc documents it MT-safe. No Rust object refers to
    // the pages it releases (they are free), and it does not move or free
    // any allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}
