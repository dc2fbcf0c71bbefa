//! The core's `codec::CodecError` as Python exceptions: the one place the extension maps it.
//!
//! Damage (corrupt, truncated, undecompressable bytes) becomes `storage._native.CodecError`,
//! which storage/codec_errors.py turns into storage.errors.CorruptRecordError with the file
//! and byte the caller knows; a caller's bad argument (`CodecError::Value`) is a ValueError.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::codec::CodecError as Error;

create_exception!(
    storage._native,
    CodecError,
    PyValueError,
    "Bytes that are not a valid batch: args are (kind, message, position); kind is 'corrupt', \
     'truncated', 'decompress' or 'too_large' (inflates past what the batch may hold), position the byte inside the parsed region or None."
);

pub fn to_py(err: Error) -> PyErr {
    match err {
        Error::Corrupt { message, position } => CodecError::new_err(("corrupt", message, position)),
        Error::Truncated => CodecError::new_err(("truncated", "truncated", None::<usize>)),
        Error::Decompress(message) => CodecError::new_err(("decompress", message, None::<usize>)),
        Error::TooLarge(message) => CodecError::new_err(("too_large", message, None::<usize>)),
        Error::Value(message) => PyValueError::new_err(message),
    }
}
