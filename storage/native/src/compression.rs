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

/// The most a records region may inflate to: Java's reader holds it in one ByteBuffer
/// (at most 2 GiB), and a small hostile stream must not make this process allocate more.
const MAX_INFLATED: u64 = i32::MAX as u64;

fn within_limit(codec: u8, out: Vec<u8>) -> Result<Vec<u8>> {
    if out.len() as u64 > MAX_INFLATED {
        return Err(failed(codec, format!("inflates past {MAX_INFLATED} bytes")));
    }
    Ok(out)
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

pub fn decompress(codec: u8, data: &[u8]) -> Result<Vec<u8>> {
    match codec {
        NONE => Ok(data.to_vec()),
        GZIP => gzip(data),
        SNAPPY => snappy(data),
        LZ4 => {
            if data.is_empty() {
                return Err(failed(LZ4, "empty stream"));
            }
            lz4_frames_end_exactly(data)?;
            let mut out = Vec::with_capacity(data.len() * 3);
            lz4_flex::frame::FrameDecoder::new(data)
                .take(MAX_INFLATED + 1)
                .read_to_end(&mut out)
                .map_err(|e| failed(LZ4, e))?;
            within_limit(LZ4, out)
        }
        ZSTD => {
            if data.is_empty() {
                return Err(failed(ZSTD, "empty stream"));
            }
            let mut out = Vec::with_capacity(data.len() * 3);
            zstd::stream::read::Decoder::new(data)
                .map_err(|e| failed(ZSTD, e))?
                .take(MAX_INFLATED + 1)
                .read_to_end(&mut out)
                .map_err(|e| failed(ZSTD, e))?;
            within_limit(ZSTD, out)
        }
        other => Err(CodecError::Value(format!("unknown compression type {other}"))),
    }
}

/// Every gzip member, as java.util.zip.GZIPInputStream reads them; a member cut short is
/// corruption, not an empty result.
fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() * 3);
    let mut rest = data;
    loop {
        let mut dec = flate2::bufread::GzDecoder::new(rest);
        let room = (MAX_INFLATED + 1).saturating_sub(out.len() as u64);
        match (&mut dec).take(room).read_to_end(&mut out) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(CodecError::Decompress("truncated gzip stream".into()))
            }
            Err(e) => return Err(failed(GZIP, e)),
        }
        if dec.header().is_none() {
            return Err(failed(GZIP, "not a gzip stream"));
        }
        if out.len() as u64 > MAX_INFLATED {
            return within_limit(GZIP, out);
        }
        rest = dec.into_inner();
        if rest.is_empty() {
            return Ok(out);
        }
    }
}

fn snappy_block(block: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let claimed = snap::raw::decompress_len(block).map_err(|e| failed(SNAPPY, e))?;
    if claimed > SNAPPY_MAX_EXPANSION * block.len() + 64 {
        return Err(CodecError::Decompress(format!(
            "snappy block of {} bytes claims {claimed} uncompressed bytes",
            block.len()
        )));
    }
    let start = out.len();
    out.resize(start + claimed, 0);
    let n = snap::raw::Decoder::new().decompress(block, &mut out[start..]).map_err(|e| failed(SNAPPY, e))?;
    out.truncate(start + n);
    Ok(())
}

/// xerial framing (16-byte header, then [i32 big-endian length + raw block]*), or a bare raw
/// block when the magic is absent, as xerial's SnappyInputStream falls back to.
fn snappy(data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    if !data.starts_with(XERIAL_MAGIC) {
        snappy_block(data, &mut out)?;
        return Ok(out);
    }
    let mut pos = 0usize;
    while pos < data.len() {
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
        snappy_block(&data[pos..pos + length as usize], &mut out)?;
        pos += length as usize;
    }
    Ok(out)
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
