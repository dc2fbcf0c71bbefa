//! The Python face of producer.rs: `ProducerStateEntry` (what storage/producer_state.py keeps per
//! producer, on every path: appends, markers, replay, snapshots, expiry, staged copies) and
//! `check_batch`/`check_sequence`, the one check of a client batch against it.
//!
//! A refusal is raised as its storage.errors class (imported only when raised, as builder.rs does
//! for its one typed error), so callers see the same exceptions and messages wherever the check
//! ran. `BatchMetadata` (a NamedTuple of storage/producer_state.py, its class looked up once) is
//! built only when Python asks for a batch (`batches`, a duplicate): the quiet append never makes one.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyTuple, PyType};

use super::ffi::SubclassTuples;

use crate::producer::{self, Batch, BatchMeta, Entry, Refusal, Verdict, BATCH_WINDOW};

/// The refusal as the storage.errors exception it names (ValueError if that import fails).
pub fn refusal_to_py(py: Python<'_>, refusal: &Refusal) -> PyErr {
    let (name, message) = refusal.parts();
    let typed = py.import("storage.errors").and_then(|m| m.getattr(name)).and_then(|cls| cls.call1((message,)));
    match typed {
        Ok(err) => PyErr::from_value(err),
        Err(_) => PyValueError::new_err(message.to_string()),
    }
}

/// storage.producer_state.BatchMetadata, looked up once (a duplicate's answer is on the retry path
/// of every append, and a NamedTuple's own `__new__` is a Python call: ffi.rs fills it directly).
static BATCH_METADATA: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn meta_to_py<'py>(py: Python<'py>, m: &BatchMeta) -> PyResult<Bound<'py, PyAny>> {
    let cls = BATCH_METADATA.import(py, "storage.producer_state", "BatchMetadata")?;
    let int = |v: i64| PyInt::new(py, v).into_any();
    SubclassTuples::new(cls.as_any())?.make([
        int(m.first_seq),
        int(m.last_seq),
        int(m.first_offset),
        int(m.last_offset),
        int(m.timestamp),
    ])
}

/// What the partition remembers of one producer (storage/producer_state.py; docs/kafka-formats.md §5.1).
#[pyclass(module = "storage._native", eq)]
#[derive(PartialEq)]
pub struct ProducerStateEntry {
    pub(crate) entry: Entry,
}

#[pymethods]
impl ProducerStateEntry {
    #[new]
    #[pyo3(signature = (producer_id, epoch=-1, coordinator_epoch=-1, last_timestamp=-1, current_txn_first_offset=-1))]
    fn new(
        producer_id: i64,
        epoch: i64,
        coordinator_epoch: i64,
        last_timestamp: i64,
        current_txn_first_offset: i64,
    ) -> Self {
        let mut entry = Entry::new(producer_id);
        entry.epoch = epoch;
        entry.coordinator_epoch = coordinator_epoch;
        entry.last_timestamp = last_timestamp;
        entry.current_txn_first_offset = current_txn_first_offset;
        ProducerStateEntry { entry }
    }

    #[getter]
    fn producer_id(&self) -> i64 {
        self.entry.producer_id
    }

    #[getter]
    fn epoch(&self) -> i64 {
        self.entry.epoch
    }

    #[setter]
    fn set_epoch(&mut self, value: i64) {
        self.entry.epoch = value;
    }

    #[getter]
    fn coordinator_epoch(&self) -> i64 {
        self.entry.coordinator_epoch
    }

    #[setter]
    fn set_coordinator_epoch(&mut self, value: i64) {
        self.entry.coordinator_epoch = value;
    }

    #[getter]
    fn last_timestamp(&self) -> i64 {
        self.entry.last_timestamp
    }

    #[setter]
    fn set_last_timestamp(&mut self, value: i64) {
        self.entry.last_timestamp = value;
    }

    #[getter]
    fn current_txn_first_offset(&self) -> i64 {
        self.entry.current_txn_first_offset
    }

    #[setter]
    fn set_current_txn_first_offset(&mut self, value: i64) {
        self.entry.current_txn_first_offset = value;
    }

    /// The remembered data batches (at most 5), oldest first, as BatchMetadata.
    #[getter]
    fn batches<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let items = self.entry.batches.iter().map(|m| meta_to_py(py, m)).collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, items)
    }

    #[getter]
    fn last_seq(&self) -> i64 {
        self.entry.last_seq()
    }

    #[getter]
    fn has_open_txn(&self) -> bool {
        self.entry.has_open_txn()
    }

    fn copy(&self) -> Self {
        ProducerStateEntry { entry: self.entry.clone() }
    }

    fn find_duplicate<'py>(
        &self,
        py: Python<'py>,
        epoch: i64,
        first_seq: i64,
        last_seq: i64,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.entry.find_duplicate(epoch, first_seq, last_seq).map(|m| meta_to_py(py, &m)).transpose()
    }

    /// Any change of epoch clears the sequence window: the new epoch starts at 0.
    fn update_epoch(&mut self, epoch: i64) {
        self.entry.update_epoch(epoch);
    }

    /// Take a data batch written at `meta`'s offsets (a BatchMetadata or any 5-tuple like it).
    fn add_batch(&mut self, epoch: i64, meta: (i64, i64, i64, i64, i64), is_transactional: bool) {
        let (first_seq, last_seq, first_offset, last_offset, timestamp) = meta;
        self.entry.add_batch(
            epoch,
            BatchMeta { first_seq, last_seq, first_offset, last_offset, timestamp },
            is_transactional,
        );
    }

    fn __repr__(&self) -> String {
        let e = &self.entry;
        format!(
            "ProducerStateEntry(producer_id={}, epoch={}, coordinator_epoch={}, last_timestamp={}, \
             current_txn_first_offset={}, batches={:?})",
            e.producer_id,
            e.epoch,
            e.coordinator_epoch,
            e.last_timestamp,
            e.current_txn_first_offset,
            e.batches
                .iter()
                .map(|m| (m.first_seq, m.last_seq, m.first_offset, m.last_offset, m.timestamp))
                .collect::<Vec<_>>()
        )
    }

    /// The size of the duplicate window (Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN).
    #[classattr]
    const BATCH_WINDOW: usize = BATCH_WINDOW;
}

/// `f` on the producer's entry a Python caller passed (None: the partition has none), borrowed only
/// for the call: the one way check_batch, check_sequence and append.rs's quiet_append reach it.
pub fn with_entry<R>(entry: Option<&Bound<'_, ProducerStateEntry>>, f: impl FnOnce(Option<&Entry>) -> R) -> R {
    let borrowed = entry.map(|e| e.borrow());
    f(borrowed.as_ref().map(|e| &e.entry))
}

/// Check a client batch against its producer's entry (None: the partition has none): raises the
/// storage.errors refusal, returns the original BatchMetadata of a retry, else whether the batch
/// opens a transaction (transactional, none open: the caller's verifier has the last word).
#[pyfunction]
#[pyo3(signature = (entry, producer_id, epoch, base_seq, last_seq, is_transactional))]
pub fn check_batch<'py>(
    py: Python<'py>,
    entry: Option<&Bound<'py, ProducerStateEntry>>,
    producer_id: i64,
    epoch: i64,
    base_seq: i64,
    last_seq: i64,
    is_transactional: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let batch = Batch { producer_id, epoch, base_seq, last_seq, is_transactional };
    match with_entry(entry, |e| producer::check(e, &batch)) {
        Ok(Verdict::Duplicate(m)) => meta_to_py(py, &m),
        Ok(Verdict::New { opens_txn }) => Ok(pyo3::types::PyBool::new(py, opens_txn).to_owned().into_any()),
        Err(refusal) => Err(refusal_to_py(py, &refusal)),
    }
}

/// The sequence rule alone (docs/kafka-formats.md §5.1 step 3): raises its refusal, else None.
#[pyfunction]
pub fn check_sequence(
    py: Python<'_>,
    entry: Option<&Bound<'_, ProducerStateEntry>>,
    epoch: i64,
    first_seq: i64,
) -> PyResult<()> {
    with_entry(entry, |e| producer::check_sequence(e, epoch, first_seq)).map_err(|r| refusal_to_py(py, &r))
}
