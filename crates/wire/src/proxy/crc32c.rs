//! CRC32C (Castagnoli), the checksum of `PP2_TYPE_CRC32C` (RFC 4960,
//! appendix B): reflected polynomial 0x1EDC6F41, initial value and final
//! XOR all ones.

/// The reflected form of the Castagnoli polynomial 0x1EDC6F41.
const POLYNOMIAL: u32 = 0x82F6_3B78;

/// One entry per byte value: the CRC of that byte alone, without the
/// initial and final inversion. Built at compile time.
const TABLE: [u32; 256] = build_table();

const fn build_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLYNOMIAL
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
}

/// A running CRC32C, so a header can be checksummed in pieces (with its
/// checksum field replaced by zeroes) without copying it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Crc32c(u32);

impl Crc32c {
    pub(super) fn new() -> Self {
        Crc32c(!0)
    }

    pub(super) fn update(mut self, bytes: &[u8]) -> Self {
        for &b in bytes {
            // The index is the low byte of (crc ^ b): always below 256.
            let index = usize::from((self.0 as u8) ^ b);
            self.0 = (self.0 >> 8) ^ TABLE[index];
        }
        self
    }

    pub(super) fn finish(self) -> u32 {
        !self.0
    }
}

/// The CRC32C (Castagnoli) checksum of `bytes`, as `PP2_TYPE_CRC32C` uses it.
///
/// ```
/// assert_eq!(apiway_wire::proxy::crc32c(b"123456789"), 0xE306_9283);
/// ```
pub fn crc32c(bytes: &[u8]) -> u32 {
    Crc32c::new().update(bytes).finish()
}
