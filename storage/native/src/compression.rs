//! Batch compression in the stream formats Kafka's Java client uses (docs/kafka-formats.md §1.4);
//! storage/compression_reference.py is the readable Python version of the same rules.
//!
//! Readers accept what Java's readers accept: several gzip members, xerial-framed snappy
//! (repeated stream headers skipped) or a bare raw snappy block, any LZ4 frame, any zstd
//! frames. Writers emit the framing Java expects: for LZ4 independent 64 KiB blocks
//! without checksums (KafkaLZ4BlockInputStream rejects linked blocks).

#![forbid(unsafe_code)] // the core is safe Rust: `unsafe` lives in bindings/ only

use std::io::{Read, Write};

use crate::codec::{CodecError, Result};

pub const NONE: u8 = 0;
pub const GZIP: u8 = 1;
pub const SNAPPY: u8 = 2;
pub const LZ4: u8 = 3;
pub const ZSTD: u8 = 4;

const GZIP_LEVEL: u32 = 6; // java.util.zip.Deflater.DEFAULT_COMPRESSION
const ZSTD_LEVEL: i32 = 3; // Kafka's compression.zstd.level default

pub const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER: &[u8] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
const XERIAL_BLOCK: usize = 32 * 1024;
/// No snappy element expands more than ~21x, so a block claiming more is corrupt - and is
/// rejected before its claim is allocated.
const SNAPPY_MAX_EXPANSION: usize = 32;

/// magic, FLG 0x60 (version 01, independent blocks), BD 0x40 (64 KiB), header checksum.
const LZ4_FRAME_HEADER: &[u8] = b"\x04\x22\x4d\x18\x60\x40\x82";
const LZ4_BLOCK: usize = 64 * 1024;
const LZ4_UNCOMPRESSED: u32 = 0x8000_0000;

/// How far a records region may inflate (docs/kafka-formats.md §1.4, "How far a batch may
/// inflate"): 64 times its compressed size, and never less than 64 MiB (64 times the default
/// `max.message.bytes`, so every batch txlog's producer builds under the default limits fits), and
/// never past what one Java ByteBuffer holds. A batch is at most the topic's `max.message.bytes`,
/// so this bounds what a reader holds for one batch by the topic's limit, whatever the stream
/// says: a decoder inflates incrementally and stops one byte past the limit.
pub const INFLATION_RATIO: u64 = 64;
pub const MIN_INFLATION_LIMIT: u64 = 64 << 20;
const MAX_INFLATED: u64 = i32::MAX as u64;

/// The most `compressed_len` bytes of records region may inflate to (see INFLATION_RATIO).
pub fn inflation_limit(compressed_len: usize) -> u64 {
    (compressed_len as u64).saturating_mul(INFLATION_RATIO).clamp(MIN_INFLATION_LIMIT, MAX_INFLATED)
}

fn too_large(codec: u8, compressed_len: usize, limit: u64) -> CodecError {
    CodecError::TooLarge(format!(
        "{} records region of {compressed_len} bytes inflates past {limit} bytes, the most a batch of its size may hold",
        name(codec)
    ))
}

pub fn name(codec: u8) -> &'static str {
    match codec {
        GZIP => "gzip",
        SNAPPY => "snappy",
        LZ4 => "lz4",
        ZSTD => "zstd",
        _ => "none",
    }
}

fn failed(codec: u8, detail: impl std::fmt::Display) -> CodecError {
    CodecError::Decompress(format!("cannot decompress {} data: {detail}", name(codec)))
}

pub fn compress(codec: u8, data: &[u8]) -> Result<Vec<u8>> {
    match codec {
        NONE => Ok(data.to_vec()),
        GZIP => {
            let mut enc = flate2::write::GzEncoder::new(
                Vec::with_capacity(data.len() / 2 + 64),
                flate2::Compression::new(GZIP_LEVEL),
            );
            enc.write_all(data).and_then(|_| enc.finish()).map_err(|e| CodecError::Value(e.to_string()))
        }
        SNAPPY => {
            let mut out = Vec::with_capacity(XERIAL_HEADER.len() + data.len() + data.len() / 6 + 64);
            out.extend_from_slice(XERIAL_HEADER);
            let mut enc = snap::raw::Encoder::new();
            for chunk in data.chunks(XERIAL_BLOCK) {
                let block = enc.compress_vec(chunk).map_err(|e| CodecError::Value(e.to_string()))?;
                out.extend_from_slice(&(block.len() as i32).to_be_bytes());
                out.extend_from_slice(&block);
            }
            Ok(out)
        }
        LZ4 => {
            let mut out = Vec::with_capacity(LZ4_FRAME_HEADER.len() + data.len() + 64);
            out.extend_from_slice(LZ4_FRAME_HEADER);
            for chunk in data.chunks(LZ4_BLOCK) {
                let block = lz4_flex::block::compress(chunk);
                if block.len() >= chunk.len() {
                    // incompressible: store the chunk itself
                    out.extend_from_slice(&(chunk.len() as u32 | LZ4_UNCOMPRESSED).to_le_bytes());
                    out.extend_from_slice(chunk);
                } else {
                    out.extend_from_slice(&(block.len() as u32).to_le_bytes());
                    out.extend_from_slice(&block);
                }
            }
            out.extend_from_slice(&[0, 0, 0, 0]);
            Ok(out)
        }
        ZSTD => zstd::bulk::compress(data, ZSTD_LEVEL).map_err(|e| CodecError::Value(e.to_string())),
        other => Err(CodecError::Value(format!("unknown compression type {other}"))),
    }
}

/// `data` inflated, refused (TooLarge) past `inflation_limit(data.len())`.
pub fn decompress(codec: u8, data: &[u8]) -> Result<Vec<u8>> {
    decompress_within(codec, data, inflation_limit(data.len()))
}

/// `data` inflated, refused (TooLarge) once it passes `limit` bytes: memory stays within the
/// limit (plus the codec's window), whatever sizes the stream claims.
pub fn decompress_within(codec: u8, data: &[u8], limit: u64) -> Result<Vec<u8>> {
    if codec == NONE {
        return Ok(data.to_vec());
    }
    let mut out = Vec::with_capacity(data.len().saturating_mul(3).min(limit as usize));
    inflate(codec, data, limit, &mut out)?;
    Ok(out)
}

/// How many bytes `data` inflates to, never holding more than a codec block of them: the append
/// path's check that a batch is within `inflation_limit` (TooLarge past it) and whole.
pub fn inflated_size(codec: u8, data: &[u8]) -> Result<u64> {
    inflated_size_within(codec, data, inflation_limit(data.len()))
}

/// `inflated_size` against any `limit`.
pub fn inflated_size_within(codec: u8, data: &[u8], limit: u64) -> Result<u64> {
    if codec == NONE {
        return Ok(data.len() as u64);
    }
    inflate(codec, data, limit, &mut std::io::sink())
}

/// The most one compressed byte of `codec` can inflate to, or None (zstd: no bound).
pub fn max_expansion(codec: u8) -> Option<u64> {
    match codec {
        NONE => Some(1),
        // a block may claim 32 per byte plus 64 (snappy_block), and has at least one byte
        SNAPPY => Some(SNAPPY_MAX_EXPANSION as u64 + 64),
        GZIP => Some(1032), // deflate's longest match: 258 bytes in 2 bits
        LZ4 => Some(256),   // a match length grows by at most 255 per byte
        _ => None,
    }
}

/// Whether `compressed_len` bytes of `codec` could inflate past their limit at all (by the
/// codec's largest expansion; zstd has none).
pub fn may_exceed_limit(codec: u8, compressed_len: usize) -> bool {
    match max_expansion(codec) {
        _ if codec == NONE => false, // nothing to inflate: the region is what it is
        Some(most) => (compressed_len as u64).saturating_mul(most) > inflation_limit(compressed_len),
        None => true,
    }
}

/// Whether `data`, a stream this process's own encoder (`compress`) just built, is within its
/// inflation limit without inflating it: by the codec's largest expansion, or for zstd by the
/// content size `compress` writes into its one frame. Only for such trusted bytes: a size a
/// stream declares is never believed for bytes from outside (`inflated_size` counts those).
pub fn own_stream_within_limit(codec: u8, data: &[u8]) -> bool {
    if !may_exceed_limit(codec, data.len()) {
        return true;
    }
    if codec != ZSTD || zstd::zstd_safe::find_frame_compressed_size(data) != Ok(data.len()) {
        return false; // not one whole frame: not what `compress` writes
    }
    matches!(zstd::zstd_safe::get_frame_content_size(data), Ok(Some(size)) if size <= inflation_limit(data.len()))
}

/// Inflate `data` into `out` incrementally, stopping one byte past `limit`; returns the size.
fn inflate<W: Write>(codec: u8, data: &[u8], limit: u64, out: &mut W) -> Result<u64> {
    if data.is_empty() && codec != GZIP && codec != SNAPPY {
        return Err(failed(codec, "empty stream"));
    }
    let size = match codec {
        GZIP => gzip(data, limit, out)?,
        SNAPPY => snappy(data, limit, out)?,
        LZ4 => {
            lz4_frames_end_exactly(data)?;
            let mut dec = lz4_flex::frame::FrameDecoder::new(data).take(limit + 1);
            std::io::copy(&mut dec, out).map_err(|e| failed(LZ4, e))?
        }
        ZSTD => {
            let dec = zstd::stream::read::Decoder::with_buffer(data).map_err(|e| failed(ZSTD, e))?;
            std::io::copy(&mut dec.take(limit + 1), out).map_err(|e| failed(ZSTD, e))?
        }
        other => return Err(CodecError::Value(format!("unknown compression type {other}"))),
    };
    if size > limit {
        return Err(too_large(codec, data.len(), limit));
    }
    Ok(size)
}

/// Every gzip member, as java.util.zip.GZIPInputStream reads them; a member cut short is
/// corruption, not an empty result.
fn gzip<W: Write>(data: &[u8], limit: u64, out: &mut W) -> Result<u64> {
    let mut size = 0u64;
    let mut rest = data;
    loop {
        let mut dec = flate2::bufread::GzDecoder::new(rest);
        match std::io::copy(&mut (&mut dec).take(limit + 1 - size), out) {
            Ok(n) => size += n,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(CodecError::Decompress("truncated gzip stream".into()))
            }
            Err(e) => return Err(failed(GZIP, e)),
        }
        if dec.header().is_none() {
            return Err(failed(GZIP, "not a gzip stream"));
        }
        rest = dec.into_inner();
        if size > limit || rest.is_empty() {
            return Ok(size);
        }
    }
}

/// One raw snappy block into `out`, refused before anything is allocated when its length
/// prefix claims more than snappy can expand to or more than the limit leaves room for.
fn snappy_block<W: Write>(block: &[u8], room: u64, scratch: &mut Vec<u8>, out: &mut W) -> Result<u64> {
    let claimed = snap::raw::decompress_len(block).map_err(|e| failed(SNAPPY, e))?;
    if claimed > SNAPPY_MAX_EXPANSION * block.len() + 64 {
        return Err(CodecError::Decompress(format!(
            "snappy block of {} bytes claims {claimed} uncompressed bytes",
            block.len()
        )));
    }
    if claimed as u64 > room {
        return Ok(room + 1); // past the limit: the caller refuses it without inflating it
    }
    scratch.clear();
    scratch.resize(claimed, 0);
    let n = snap::raw::Decoder::new().decompress(block, scratch).map_err(|e| failed(SNAPPY, e))?;
    out.write_all(&scratch[..n]).map_err(|e| failed(SNAPPY, e))?;
    Ok(n as u64)
}

/// xerial framing (16-byte header, then [i32 big-endian length + raw block]*), or a bare raw
/// block when the magic is absent, as xerial's SnappyInputStream falls back to.
fn snappy<W: Write>(data: &[u8], limit: u64, out: &mut W) -> Result<u64> {
    let mut scratch = Vec::new();
    if !data.starts_with(XERIAL_MAGIC) {
        return snappy_block(data, limit, &mut scratch, out);
    }
    let mut size = 0u64;
    let mut pos = 0usize;
    while pos < data.len() && size <= limit {
        // concatenated streams repeat the header; a block length can never start with 0x82
        if data[pos..].starts_with(XERIAL_MAGIC) {
            if pos + XERIAL_HEADER.len() > data.len() {
                return Err(CodecError::Decompress("truncated xerial snappy header".into()));
            }
            pos += XERIAL_HEADER.len();
            continue;
        }
        let len_bytes = data
            .get(pos..pos + 4)
            .ok_or_else(|| CodecError::Decompress("truncated xerial snappy block length".into()))?;
        let length = i32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        pos += 4;
        if length < 0 || pos + length as usize > data.len() {
            return Err(CodecError::Decompress(format!("xerial snappy block of {length} bytes overruns the stream")));
        }
        size += snappy_block(&data[pos..pos + length as usize], limit - size, &mut scratch, out)?;
        pos += length as usize;
    }
    Ok(size)
}

/// Check that `data` is whole LZ4 frames and nothing else: lz4_flex's reader takes a short
/// run of trailing bytes for the end of input, which would accept a damaged stream.
fn lz4_frames_end_exactly(data: &[u8]) -> Result<()> {
    let truncated = || failed(LZ4, "truncated frame");
    let u32_at = |at: usize| -> Result<u32> {
        let b = data.get(at..at + 4).ok_or_else(truncated)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let mut pos = 0usize;
    while pos < data.len() {
        let magic = u32_at(pos)?;
        if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
            // a skippable frame: length + bytes
            pos = pos.checked_add(8 + u32_at(pos + 4)? as usize).ok_or_else(truncated)?;
            continue;
        }
        if magic != 0x184D_2204 {
            return Err(failed(LZ4, format!("no frame magic at byte {pos}")));
        }
        let flg = *data.get(pos + 4).ok_or_else(truncated)?;
        let mut at = pos + 6 + if flg & 0x08 != 0 { 8 } else { 0 } + if flg & 0x01 != 0 { 4 } else { 0 } + 1;
        loop {
            let size = u32_at(at)?;
            at += 4;
            if size == 0 {
                break;
            }
            at = at
                .checked_add((size & 0x7FFF_FFFF) as usize + if flg & 0x10 != 0 { 4 } else { 0 })
                .ok_or_else(truncated)?;
        }
        if flg & 0x04 != 0 {
            at += 4;
        }
        if at > data.len() {
            return Err(truncated());
        }
        pos = at;
    }
    if pos != data.len() {
        return Err(truncated());
    }
    Ok(())
}
