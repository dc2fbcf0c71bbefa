//! The Python face of the codec: every `#[pyfunction]` and `#[pyclass]` of `storage._native`,
//! thin wrappers that turn Python objects into the core's slices and back. storage/_native.pyi
//! is their typed interface (checked against the built module by mypy's stubtest).
//!
//! `unsafe` lives here only, at the FFI edge, never in parsing: ffi.rs views a Python buffer as
//! a byte slice while the buffer is held, fills tuple subclasses as tuple.__new__ does and
//! switches the cyclic collector off during a decode; encode.rs's `Column` borrows the bytes of
//! items it holds strong references to and `encode_batches` fills bytearrays it just created;
//! builder.rs's `Held` views a buffer it holds for one append; append.rs borrows the descriptors
//! a caller pins for one quiet durable append; writeback.rs declares the one system call the
//! std library lacks (sync_file_range), a hint on a descriptor number.

pub mod append;
pub mod builder;
pub mod columns;
pub mod compression;
pub mod decode;
pub mod encode;
pub mod errors;
pub mod ffi;
pub mod format;
pub mod hashes;
pub mod header;
pub mod high_watermark;
pub mod producer;
pub mod writeback;
