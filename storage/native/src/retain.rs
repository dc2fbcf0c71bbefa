//! The log cleaner's re-encoding: one batch rebuilt with only the records the cleaner keeps
//! (Kafka's MemoryRecords.filterTo, buildRetainedRecordsInto and writeEmptyHeader;
//! docs/kafka-formats.md §11). storage/log_cleaner.py decides which records stay and calls
//! `retain` through storage.records.RecordBatch.retained.
//!
//! Why a function of its own: the producer's encoders (encoder.rs, batch_builder.rs) number
//! records 0..n and end the batch at the last of them, but a cleaned batch must keep its
//! offsets - its base offset, its lastOffsetDelta (so the producer's last sequence and the
//! log's end offset stay where they were) and each surviving record's offset delta - as
//! Kafka's cleaner writes them. Taking the batch's bytes and a keep mask (one byte per record)
//! means no Python object per record on the way in.

#![forbid(unsafe_code)] // the core is safe Rust: `unsafe` lives in bindings/ only

use crate::codec::{self, BatchFields, CodecError, Header, HeaderIn, RecordView, Result};
use crate::compression;

/// Attribute bit 5: a control batch (transaction markers).
pub const CONTROL_MASK: i16 = 0x20;
/// Attribute bit 6 (KIP-534): the base timestamp is the batch's delete horizon.
pub const DELETE_HORIZON_MASK: i16 = 0x40;

/// The batch at `buf[position]` rebuilt with the records whose `keep` byte is non-zero (one
/// byte per record, in order), as Kafka's cleaner rebuilds a batch it filtered:
///
/// * base offset, lastOffsetDelta, partition leader epoch, producer id, epoch and base
///   sequence are the original's; each kept record keeps its offset delta, timestamp, key,
///   value and headers (a header key that is not UTF-8 is written back with U+FFFD in place
///   of the bad bytes, as Kafka's cleaner writes the Java String it read); the records
///   region is compressed with the batch's own codec.
/// * `delete_horizon` (KIP-534) sets attribute bit 6 and becomes the base timestamp; without
///   it the bit is cleared and the base timestamp is the first kept record's. Timestamp
///   deltas are counted from that base. maxTimestamp is the largest kept timestamp, or the
///   original's with LOG_APPEND_TIME (where every record's timestamp is that one).
/// * With no record kept, the result is Kafka's empty header (writeEmptyHeader): no records,
///   no codec, no delete horizon, base and max timestamp the original's maxTimestamp - what
///   stays of a batch that carries a producer's state or the log's end offset.
///
/// The input's CRC is not checked (the cleaner read the records already); the output's is
/// computed. A keep mask whose length is not the record count is a Value error; damaged
/// records are a Corrupt/Decompress error, as the decoders report them.
pub fn retain(buf: &[u8], position: usize, keep: &[u8], delete_horizon: Option<i64>) -> Result<Vec<u8>> {
    let header = codec::parse_header(buf, position, false)?;
    if header.records_count < 0 || keep.len() != header.records_count as usize {
        return Err(CodecError::Value(format!(
            "a keep mask of {} entries for a batch of {} records",
            keep.len(),
            header.records_count
        )));
    }
    if keep.iter().all(|&k| k == 0) {
        return empty_header(&header);
    }
    let mut owned = Vec::new();
    let data = codec::records_region(buf, position, &header, &mut owned)?;
    let kept = kept_records(data, &header, keep)?;
    let log_append_time = header.attributes & codec::TIMESTAMP_TYPE_MASK != 0;
    let base_timestamp = delete_horizon.unwrap_or(kept[0].1);
    let max_timestamp =
        if log_append_time { header.max_timestamp } else { kept.iter().map(|k| k.1).max().unwrap_or(base_timestamp) };
    let mut attributes = header.attributes & !DELETE_HORIZON_MASK;
    if delete_horizon.is_some() {
        attributes |= DELETE_HORIZON_MASK;
    }
    let fields = BatchFields { attributes, base_timestamp, max_timestamp, ..original_fields(&header) };
    let mut out = vec![0; codec::HEADER_SIZE];
    let codec_id = header.compression();
    if codec_id == compression::NONE {
        put_kept(&mut out, &kept, base_timestamp)?;
    } else {
        let mut region = Vec::with_capacity(data.len());
        put_kept(&mut region, &kept, base_timestamp)?;
        out.extend_from_slice(&compression::compress(codec_id, &region)?);
    }
    codec::fill_header_spanning(&mut out, kept.len() as i32, header.last_offset_delta, &fields)?;
    Ok(out)
}

/// A kept record: its view and its timestamp (absolute, as readers see it).
type Kept<'a> = (RecordView<'a>, i64);

/// The records `keep` selects, with their timestamps; the whole region is decoded, so a
/// batch whose records do not tile it exactly is refused as the decoders refuse it.
fn kept_records<'a>(data: &'a [u8], header: &Header, keep: &[u8]) -> Result<Vec<Kept<'a>>> {
    let base = header.record_base();
    let mut kept = Vec::with_capacity(keep.iter().filter(|&&k| k != 0).count());
    let mut index = 0;
    codec::for_each_record(data, header.records_count, |rec| {
        if keep[index] != 0 {
            let timestamp = if base.use_deltas {
                base.timestamp
                    .checked_add(rec.timestamp_delta)
                    .ok_or_else(|| CodecError::Value(format!("timestamp of record {index} is out of int64 range")))?
            } else {
                base.timestamp
            };
            kept.push((rec, timestamp));
        }
        index += 1;
        Ok(())
    })?;
    Ok(kept)
}

/// Append the kept records, each with its own offset delta and a timestamp delta from `base`.
fn put_kept(out: &mut Vec<u8>, kept: &[Kept], base_timestamp: i64) -> Result<()> {
    for (rec, timestamp) in kept {
        let delta = timestamp.checked_sub(base_timestamp).ok_or_else(|| {
            CodecError::Value(format!("timestamp delta out of int64 range: {timestamp} from {base_timestamp}"))
        })?;
        if rec.headers.iter().all(|(name, _)| std::str::from_utf8(name).is_ok()) {
            put_one(out, rec, delta, &rec.headers)?;
        } else {
            // Kafka's cleaner holds a header key as a Java String (invalid UTF-8 read as
            // U+FFFD) and writes that String back: the same replacement here
            let names: Vec<String> =
                rec.headers.iter().map(|(name, _)| String::from_utf8_lossy(name).into_owned()).collect();
            let headers: Vec<HeaderIn> = names.iter().zip(&rec.headers).map(|(n, (_, v))| (n.as_bytes(), *v)).collect();
            put_one(out, rec, delta, &headers)?;
        }
    }
    Ok(())
}

fn put_one(out: &mut Vec<u8>, rec: &RecordView, timestamp_delta: i64, headers: &[HeaderIn]) -> Result<()> {
    let body = codec::record_body_size(rec.offset_delta, timestamp_delta, rec.key, rec.value, headers);
    codec::put_record(out, rec.offset_delta, timestamp_delta, rec.key, rec.value, headers, body)
}

/// The header fields a cleaned batch keeps from the original whatever was removed.
fn original_fields(header: &Header) -> BatchFields {
    BatchFields {
        base_offset: header.base_offset,
        partition_leader_epoch: header.partition_leader_epoch,
        attributes: header.attributes,
        base_timestamp: header.base_timestamp,
        max_timestamp: header.max_timestamp,
        producer_id: header.producer_id,
        producer_epoch: header.producer_epoch,
        base_sequence: header.base_sequence,
    }
}

/// Kafka's DefaultRecordBatch.writeEmptyHeader for `header`'s batch: offsets and producer
/// fields kept, timestamp type, transactional and control bits kept, everything else gone.
fn empty_header(header: &Header) -> Result<Vec<u8>> {
    let fields = BatchFields {
        attributes: header.attributes & (codec::TIMESTAMP_TYPE_MASK | codec::TRANSACTIONAL_MASK | CONTROL_MASK),
        base_timestamp: header.max_timestamp,
        max_timestamp: header.max_timestamp,
        ..original_fields(header)
    };
    let mut out = vec![0; codec::HEADER_SIZE];
    codec::fill_header_spanning(&mut out, 0, header.last_offset_delta, &fields)?;
    Ok(out)
}
