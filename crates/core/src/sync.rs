//! Locking shared by the roles.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, also when a thread panicked while holding it: the roles'
/// mutexes guard plain state (listener lists, settings) with no invariant a
/// panic could break, so a poisoned lock is still fine to use.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
