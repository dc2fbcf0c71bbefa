//! What every binding shares at the FFI edge: byte views of Python buffers, tuple-subclass
//! construction, the cyclic GC switch, and when to release the GIL.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple, PyType};

/// Below this many bytes of records an encoder keeps the GIL: releasing it costs little,
/// but taking it back can wait a whole switch interval (5 ms) behind a busy thread.
pub const DETACH_BYTES: usize = 256 * 1024;

/// The type's name, for TypeErrors that say what was given.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
}

/// Run `f` on the bytes of any contiguous buffer (bytes without a copy, or a memoryview,
/// mmap, bytearray held for the duration of the call).
pub fn with_bytes<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> PyResult<R>) -> PyResult<R> {
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        return f(bytes.as_bytes());
    }
    let buffer = PyBuffer::<u8>::get(obj)?;
    if !buffer.is_c_contiguous() {
        return Err(PyTypeError::new_err("a contiguous buffer is needed"));
    }
    // SAFETY: the buffer is held (so the memory stays valid) until `buffer` drops after `f`;
    // it is contiguous and `len_bytes` long. Its content may change under a concurrent
    // writer, which every read tolerates: all reads are bounds-checked by length only.
    let slice = unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) };
    f(slice)
}

/// Run `f` on the bytes of a writable contiguous buffer (a bytearray, or a memoryview or
/// mmap of writable memory), held for the duration of the call.
pub fn with_bytes_mut<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&mut [u8]) -> PyResult<R>) -> PyResult<R> {
    let buffer = PyBuffer::<u8>::get(obj)?;
    if buffer.readonly() {
        return Err(PyTypeError::new_err(format!("a writable buffer (a bytearray) is needed, not {}", type_name(obj))));
    }
    if !buffer.is_c_contiguous() {
        return Err(PyTypeError::new_err("a contiguous buffer is needed"));
    }
    // SAFETY: the buffer is held (so the memory stays valid) until `buffer` drops after `f`;
    // it is writable, contiguous and `len_bytes` long, and the GIL is held throughout, so
    // no other Python code touches it while `f` runs.
    let slice = unsafe { std::slice::from_raw_parts_mut(buffer.buf_ptr() as *mut u8, buffer.len_bytes()) };
    f(slice)
}

/// Builds instances of a tuple subclass (a NamedTuple such as Record or ConsumerRecord) the way
/// `tuple.__new__(cls, items)` does - the type's tp_alloc, then the items - without the
/// intermediate tuple and the call, which cost as much as decoding the record.
pub struct SubclassTuples<'py> {
    cls: Bound<'py, PyType>,
    alloc: pyo3::ffi::allocfunc,
}

impl<'py> SubclassTuples<'py> {
    pub fn new(cls: &Bound<'py, PyAny>) -> PyResult<Self> {
        let cls = cls.cast::<PyType>()?.clone();
        if !cls.is_subclass_of::<PyTuple>()? {
            return Err(PyTypeError::new_err("cls must be a subclass of tuple"));
        }
        // SAFETY: cls is a live type object; Py_tp_alloc is readable for every type (3.10+).
        let slot = unsafe { pyo3::ffi::PyType_GetSlot(cls.as_type_ptr(), pyo3::ffi::Py_tp_alloc) };
        if slot.is_null() {
            return Err(PyTypeError::new_err("cls has no tp_alloc"));
        }
        // SAFETY: the Py_tp_alloc slot holds an allocfunc.
        let alloc = unsafe { std::mem::transmute::<*mut std::ffi::c_void, pyo3::ffi::allocfunc>(slot) };
        Ok(SubclassTuples { cls, alloc })
    }

    /// The type and its tp_alloc, for a builder kept across calls (bindings/builder.rs SendFastPath).
    pub fn parts(self) -> (Py<PyType>, pyo3::ffi::allocfunc) {
        (self.cls.unbind(), self.alloc)
    }

    pub fn make<const N: usize>(&self, items: [Bound<'py, PyAny>; N]) -> PyResult<Bound<'py, PyAny>> {
        let py = self.cls.py();
        // SAFETY: tp_alloc of a tuple subclass returns a new reference to a zeroed tuple of N
        // slots (or NULL with an exception set); PyTuple_SetItem steals each item's reference
        // into a slot of that fresh, unshared tuple, exactly as tuple_subtype_new fills it.
        unsafe {
            let obj = (self.alloc)(self.cls.as_type_ptr(), N as pyo3::ffi::Py_ssize_t);
            if obj.is_null() {
                return Err(PyErr::fetch(py));
            }
            let obj = Bound::from_owned_ptr(py, obj);
            for (i, item) in items.into_iter().enumerate() {
                if pyo3::ffi::PyTuple_SetItem(obj.as_ptr(), i as pyo3::ffi::Py_ssize_t, item.into_ptr()) != 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            Ok(obj)
        }
    }
}

/// Keeps the cyclic GC from running while a decoder creates thousands of objects: none of
/// them can be part of a cycle, and a collection pass per few hundred allocations would
/// cost more than the decoding. Restores the previous state when dropped.
pub struct NoGc(bool);

impl NoGc {
    pub fn new() -> Self {
        // SAFETY: called with the GIL held; PyGC_Disable only flips the collector's switch.
        NoGc(unsafe { pyo3::ffi::PyGC_Disable() } != 0)
    }
}

impl Drop for NoGc {
    fn drop(&mut self) {
        if self.0 {
            // SAFETY: as above.
            unsafe { pyo3::ffi::PyGC_Enable() };
        }
    }
}
