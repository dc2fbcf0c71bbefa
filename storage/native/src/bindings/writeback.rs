//! Early writeback of a range a writer will fdatasync soon (storage/partition_log.py
//! `PartitionLog.append_requests`, issue 26).
//!
//! A producer's round appends several requests and then makes them durable with one fdatasync.
//! Without a hint the kernel starts writing the dirty pages only when that fdatasync asks, so the
//! disk idles while the requests are written and the encoder works, then the fdatasync waits for
//! all of them at once. `sync_file_range(SYNC_FILE_RANGE_WRITE)` starts the writeback of a range
//! that is complete and returns at once: the later fdatasync finds most pages already written.
//! It is a hint only, never a durability step: the fdatasync after it is what makes the range
//! durable and what reports a write error (the kernel keeps the error for it), so a failure here
//! is ignored.

use pyo3::prelude::*;

#[cfg(target_os = "linux")]
mod sys {
    const SYNC_FILE_RANGE_WRITE: u32 = 2;

    extern "C" {
        fn sync_file_range(fd: i32, offset: i64, nbytes: i64, flags: u32) -> i32;
    }

    pub fn start_writeback(fd: i32, offset: i64, length: i64) {
        // SAFETY: a plain system call on a descriptor number; an invalid one fails with EBADF,
        // which is ignored like every failure of this hint (see the module's docstring).
        unsafe {
            sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    /// No such hint elsewhere: the fdatasync does all the writing, as before.
    pub fn start_writeback(_fd: i32, _offset: i64, _length: i64) {}
}

/// Start writing `length` bytes of `fd` from `offset` to disk without waiting (a hint: nothing
/// is reported, and nothing is durable until the caller's fdatasync). The GIL is released for
/// the call: starting the writeback of megabytes queues their pages, which takes a while.
#[pyfunction]
pub fn start_writeback(py: Python<'_>, fd: i32, offset: i64, length: i64) {
    if length > 0 && offset >= 0 {
        py.detach(|| sys::start_writeback(fd, offset, length));
    }
}
