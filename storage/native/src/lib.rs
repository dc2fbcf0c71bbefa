//! `storage._native`: the per-record loops of txlog's record codec, as a Python extension.
//!
//! Two layers. The core - codec.rs (header, CRC, record decoding and encoding), compression.rs
//! (the four codecs), format.rs (`txlog consume`'s text lines), encoder.rs (the producer's bulk path), batch_builder.rs (its per-record
//! path), retain.rs (the log cleaner's re-encoding of a filtered batch), columns.rs
//! (Arrow-ready columns), producer.rs (a producer's state in a partition and the check of a batch against it)
//! and high_watermark.rs (the high watermark file's bytes) - is safe Rust that never touches Python: the
//! property tests in tests.rs drive it directly, and a test there checks that it never uses
//! PyO3. bindings/ is the Python face: conversions, the GIL, and `unsafe` at the FFI edge only.
//! This file registers the bindings as the module; storage/_native.pyi is its typed interface.
//!
//! Orchestration stays in Python: storage/records.py wraps the functions here (its RecordBatch
//! is a subclass of bindings/header.rs's BatchHeader), and storage/codec_errors.py turns
//! `CodecError` into the typed errors of storage/errors.py, naming the file and the byte. A panic
//! in here would become a Python `PanicException` (PyO3 catches it at the FFI boundary), but the
//! proptests check that no input makes the codec panic.

mod batch_builder;
mod codec;
mod compression;
mod encoder;
mod format;
#[cfg(test)]
mod golden_tests;
mod high_watermark;
#[cfg(test)]
mod inflation_tests;
mod producer;
mod retain;
#[cfg(test)]
mod retain_tests;
#[cfg(test)]
mod tests;

mod columns;

mod bindings;

use pyo3::prelude::*;

use bindings::{
    append, builder, columns as column_bindings, compression as codecs, decode, encode, errors, format as formatters,
    hashes, header, high_watermark as hw_file, producer as producers, writeback,
};

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CodecError", m.py().get_type::<errors::CodecError>())?;
    m.add_class::<header::BatchHeader>()?;
    m.add_function(wrap_pyfunction!(decode::decode_records, m)?)?;
    m.add_function(wrap_pyfunction!(decode::decode_consumer_records, m)?)?;
    m.add_function(wrap_pyfunction!(decode::walk_records, m)?)?;
    m.add_class::<column_bindings::ColumnBuilder>()?;
    m.add_class::<column_bindings::ColumnBuffer>()?;
    m.add_function(wrap_pyfunction!(codecs::compress, m)?)?;
    m.add_function(wrap_pyfunction!(codecs::decompress, m)?)?;
    m.add_function(wrap_pyfunction!(codecs::inflated_size, m)?)?;
    m.add_function(wrap_pyfunction!(codecs::inflation_limit, m)?)?;
    m.add_function(wrap_pyfunction!(codecs::own_stream_within_limit, m)?)?;
    m.add_function(wrap_pyfunction!(encode::encode_batch, m)?)?;
    m.add_function(wrap_pyfunction!(encode::encode_batches, m)?)?;
    m.add_function(wrap_pyfunction!(encode::stamp_batch, m)?)?;
    m.add_function(wrap_pyfunction!(encode::stamp_offset, m)?)?;
    m.add_function(wrap_pyfunction!(encode::retain_records, m)?)?;
    m.add_class::<builder::RecordBatchBuilder>()?;
    m.add_class::<builder::SendFastPath>()?;
    m.add_class::<formatters::ConsoleFormatter>()?;
    m.add_class::<formatters::RowFormatter>()?;
    m.add_function(wrap_pyfunction!(formatters::dump_record_lines, m)?)?;
    m.add_function(wrap_pyfunction!(formatters::table_widths_of, m)?)?;
    m.add_function(wrap_pyfunction!(formatters::table_lines, m)?)?;
    m.add_function(wrap_pyfunction!(hashes::crc32c_py, m)?)?;
    m.add_function(wrap_pyfunction!(hashes::murmur2_partitions, m)?)?;
    m.add_function(wrap_pyfunction!(append::quiet_append, m)?)?;
    m.add_function(wrap_pyfunction!(hw_file::encode_high_watermark, m)?)?;
    m.add_function(wrap_pyfunction!(hw_file::decode_high_watermark, m)?)?;
    m.add_class::<producers::ProducerStateEntry>()?;
    m.add_function(wrap_pyfunction!(producers::check_batch, m)?)?;
    m.add_function(wrap_pyfunction!(producers::check_sequence, m)?)?;
    m.add_function(wrap_pyfunction!(writeback::start_writeback, m)?)?;
    Ok(())
}
