//! A cursor over a length-prefixed TLS structure that errors instead of
//! panicking when a length lies.

use super::MalformedReason;

/// Reads big-endian integers and length-prefixed blocks off the front of a slice.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next `n` bytes.
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], MalformedReason> {
        let (head, tail) = self
            .rest
            .split_at_checked(n)
            .ok_or(MalformedReason::LengthOverrun)?;
        self.rest = tail;
        Ok(head)
    }

    pub(super) fn u8(&mut self) -> Result<u8, MalformedReason> {
        let (&byte, tail) = self
            .rest
            .split_first()
            .ok_or(MalformedReason::LengthOverrun)?;
        self.rest = tail;
        Ok(byte)
    }

    pub(super) fn u16(&mut self) -> Result<u16, MalformedReason> {
        let (&bytes, tail) = self
            .rest
            .split_first_chunk::<2>()
            .ok_or(MalformedReason::LengthOverrun)?;
        self.rest = tail;
        Ok(u16::from_be_bytes(bytes))
    }

    /// A block preceded by a one-byte length (`opaque x<0..2^8-1>`).
    pub(super) fn block_u8(&mut self) -> Result<&'a [u8], MalformedReason> {
        let len = self.u8()?;
        self.take(usize::from(len))
    }

    /// A block preceded by a two-byte length (`opaque x<0..2^16-1>`).
    pub(super) fn block_u16(&mut self) -> Result<&'a [u8], MalformedReason> {
        let len = self.u16()?;
        self.take(usize::from(len))
    }

    /// Succeeds only if every byte was read.
    pub(super) fn finish(self) -> Result<(), MalformedReason> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(MalformedReason::TrailingBytes)
        }
    }
}
