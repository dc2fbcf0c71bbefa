//! The system calls of a writer's quiet durable append, made with the GIL released once
//! (storage/partition_log.py `PartitionLog._quiet_append`, issue 26).
//!
//! Python decides everything else before the call, under the partition's writer lock it holds: the
//! batch's offset, no roll, index entry or expiry due, and the view's directory key vouched at its
//! last look. Here the batch is first checked against its producer's entry (producer.rs `check`,
//! the check every append makes: a retry or a refusal answers FALLBACK, for the Python path to
//! judge on the caught-up view), then stamped in place (codec.rs `stamp_offset`, every append's
//! stamp; the HW's bytes are high_watermark.rs's, as every publish's), then the looks
//! that prove the view is still the files are made, and only if all agree the bytes go in:
//! the directory's (mtime, inode) must equal the key (a roll, retention, DeleteRecords or a
//! cleaner's swap moves it), the `.log`'s length must equal the view's (another process's
//! append or a cut changes it) with the file still linked (scenario 71), and the active
//! segment's `.txnindex`, when the view found one, must keep the (size, mtime) the view found
//! (a dead writer's abort entry, appended without its marker, changes neither other look; see
//! `PartitionLog._quiet_append`). Then the write, the
//! fdatasync and the high watermark's pwrite. Any look that disagrees, or fails, writes nothing
//! and answers FALLBACK: the caller then takes the Python path, which catches up and judges the
//! append on the files. Once the bytes are durable the entry takes the batch, as a replay of it
//! from the log would (`Entry::add_batch`); with no entry (a producer new to the partition, or
//! none) the caller records it.
//!
//! The descriptors are the caller's (pinned by it for the call) and are never closed here.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::mem::ManuallyDrop;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::FromRawFd;

use pyo3::prelude::*;

use super::errors::to_py;
use super::ffi::with_bytes_mut;
use super::header::BatchHeader;
use super::producer::{with_entry, ProducerStateEntry};
use crate::producer::{self, BatchMeta, Verdict};
use crate::{codec, high_watermark};

/// The bytes are in, fdatasync'ed, and the high watermark's pwrite was made (its failure is not
/// the append's: HighWatermarkFile.publish ignores it too).
pub const WRITTEN: i32 = 0;
/// The batch is a retry or refused, or a look disagreed with the caller's view (or failed): nothing
/// was written.
pub const FALLBACK: i32 = 1;
/// The write failed (the errno, 0 for a write of no bytes); part of the bytes may be in the file.
pub const WRITE_FAILED: i32 = 2;
/// The fdatasync failed (the errno): what reached the disk is unknown.
pub const SYNC_FAILED: i32 = 3;

/// A borrowed descriptor as a File that is never closed.
fn borrowed(fd: i32) -> ManuallyDrop<File> {
    // SAFETY: the caller pins `fd` open for the whole call, and ManuallyDrop never closes it.
    ManuallyDrop::new(unsafe { File::from_raw_fd(fd) })
}

/// What the view last found of the files a quiet append looks at.
struct ViewKey<'a> {
    directory: &'a str,
    dir_mtime_ns: i64,
    dir_ino: u64,
    log_size: u64,
    /// The active segment's `.txnindex`, and its (size, mtime) then; size -1: there was none (the
    /// directory key vouches it is still absent, so it is not looked at).
    txn_path: &'a str,
    txn_size: i64,
    txn_mtime_ns: i64,
}

/// A file's mtime in nanoseconds, as Python's `st_mtime_ns` gives it.
fn mtime_ns(st: &std::fs::Metadata) -> i64 {
    st.mtime().saturating_mul(1_000_000_000).saturating_add(st.mtime_nsec())
}

/// Whether the directory still has the key the view vouched with, the log the view's length, and the
/// `.txnindex` the view's (size, mtime).
fn view_is_current(view: &ViewKey<'_>, log: &File) -> bool {
    let Ok(dir) = std::fs::metadata(view.directory) else { return false };
    if mtime_ns(&dir) != view.dir_mtime_ns || dir.ino() != view.dir_ino {
        return false;
    }
    if !matches!(log.metadata(), Ok(st) if st.size() == view.log_size && st.nlink() > 0) {
        return false;
    }
    view.txn_size < 0
        || matches!(std::fs::metadata(view.txn_path),
            Ok(st) if i64::try_from(st.size()) == Ok(view.txn_size) && mtime_ns(&st) == view.txn_mtime_ns)
}

/// Every byte of `data` appended to `log`, or the errno of the failure (0: a write of no bytes).
fn write_all(mut log: &File, mut data: &[u8]) -> Result<(), i32> {
    while !data.is_empty() {
        match log.write(data) {
            Ok(0) => return Err(0),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.raw_os_error().unwrap_or(0)),
        }
    }
    Ok(())
}

/// The batch's producer fields as producer.rs checks them.
fn producer_fields(h: &codec::Header) -> producer::Batch {
    producer::Batch {
        producer_id: h.producer_id,
        epoch: h.producer_epoch.into(),
        base_seq: h.base_sequence.into(),
        last_seq: codec::sequence_of(h.base_sequence, h.last_offset_delta),
        is_transactional: h.is_transactional(),
    }
}

/// The producer check, the stamp, the looks, the write, the fdatasync and the high watermark's
/// pwrite of one quiet durable append of `batch` (its bytes `data`, a writable buffer holding it
/// alone, stamped in place as every append stamps a batch, codec::stamp_offset: base offset
/// `base_offset`, `leader_epoch`, maxTimestamp `max_timestamp`), the GIL released once for the
/// system calls; then, once durable,
/// the batch recorded in `entry`, its producer's entry (None: the partition has none, or the batch
/// no producer id). `txn_path`, `txn_size`, `txn_mtime_ns`: the active segment's `.txnindex` as the
/// view found it (`ViewKey`). (status, errno), status one of WRITTEN, FALLBACK, WRITE_FAILED, SYNC_FAILED.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn quiet_append(
    py: Python<'_>,
    directory: &str,
    dir_mtime_ns: i64,
    dir_ino: u64,
    log_fd: i32,
    log_size: u64,
    txn_path: &str,
    txn_size: i64,
    txn_mtime_ns: i64,
    data: &Bound<'_, PyAny>,
    leader_epoch: i32,
    hw_fd: i32,
    high_watermark: i64,
    batch: &Bound<'_, BatchHeader>,
    entry: Option<&Bound<'_, ProducerStateEntry>>,
    base_offset: i64,
    max_timestamp: i64,
) -> PyResult<(i32, i32)> {
    let header = batch.get().header;
    let fields = producer_fields(&header);
    let verdict = with_entry(entry, |e| producer::check(e, &fields));
    // A retry is answered, and a refusal raised, by the Python path on the caught-up view (the
    // quiet append is never given a transaction verifier: a new transaction's batch needs none).
    if !matches!(verdict, Ok(Verdict::New { .. })) {
        return Ok((FALLBACK, 0));
    }
    let view = ViewKey { directory, dir_mtime_ns, dir_ino, log_size, txn_path, txn_size, txn_mtime_ns };
    let status = with_bytes_mut(data, |data| {
        codec::stamp_offset(data, 0, base_offset, Some(leader_epoch), Some(max_timestamp)).map_err(to_py)?;
        let data: &[u8] = data;
        let hw = high_watermark::encode(high_watermark);
        Ok(py.detach(|| {
            let log = borrowed(log_fd);
            if !view_is_current(&view, &log) {
                return (FALLBACK, 0);
            }
            if let Err(errno) = write_all(&log, data) {
                return (WRITE_FAILED, errno);
            }
            loop {
                match log.sync_data() {
                    Ok(()) => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return (SYNC_FAILED, e.raw_os_error().unwrap_or(0)),
                }
            }
            let _ = borrowed(hw_fd).write_at(&hw, 0); // a lagging HW file is no failure (see WRITTEN)
            (WRITTEN, 0)
        }))
    })?;
    if let (Some(e), (WRITTEN, _)) = (entry, status) {
        let last_offset = base_offset + i64::from(header.last_offset_delta);
        let meta = BatchMeta {
            first_seq: fields.base_seq,
            last_seq: fields.last_seq,
            first_offset: base_offset,
            last_offset,
            timestamp: max_timestamp,
        };
        e.borrow_mut().entry.add_batch(fields.epoch, meta, fields.is_transactional);
    }
    Ok(status)
}
