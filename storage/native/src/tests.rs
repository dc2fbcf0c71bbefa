//! Property tests: no input makes the codec panic, and what it encodes it decodes back.
//! Bounded (proptest's default case count) so `cargo test` stays a few seconds.

use proptest::prelude::*;

use crate::codec::{self, BatchFields, RecordIn};
use crate::compression;

fn fields(attributes: i16) -> BatchFields {
    BatchFields {
        base_offset: 10,
        partition_leader_epoch: 0,
        attributes,
        base_timestamp: 1_000,
        max_timestamp: 1_005,
        producer_id: 7,
        producer_epoch: 1,
        base_sequence: 3,
    }
}

type Row = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<(Vec<u8>, Option<Vec<u8>>)>, i64);

fn rows() -> impl Strategy<Value = Vec<Row>> {
    let bytes = proptest::collection::vec(any::<u8>(), 0..40);
    let header = (proptest::collection::vec(any::<u8>(), 0..8), proptest::option::of(bytes.clone()));
    proptest::collection::vec(
        (
            proptest::option::of(bytes.clone()),
            proptest::option::of(bytes),
            proptest::collection::vec(header, 0..3),
            1_000i64..1_005,
        ),
        1..20,
    )
}

fn encode(rows: &[Row], codec: u8) -> Vec<u8> {
    let records: Vec<RecordIn> = rows
        .iter()
        .map(|(k, v, h, t)| RecordIn {
            key: k.as_deref(),
            value: v.as_deref(),
            headers: h.iter().map(|(n, v)| (n.as_slice(), v.as_deref())).collect(),
            timestamp: *t,
        })
        .collect();
    let mut payload = Vec::new();
    codec::encode_records(&mut payload, &records, 1_000).unwrap();
    let payload = compression::compress(codec, &payload).unwrap();
    codec::assemble(&payload, records.len(), &fields(codec as i16)).unwrap()
}

/// Everything a reader does with a batch: header, CRC, inflate, decode, framing walk.
fn read_all(buf: &[u8]) {
    if let Ok(h) = codec::parse_header(buf, 0, false) {
        let size = h.batch_length as usize + codec::LOG_OVERHEAD;
        let region = &buf[codec::HEADER_SIZE..size];
        let _ = codec::walk_records(region);
        let codec_id = (h.attributes & 7) as u8;
        if codec_id <= compression::ZSTD {
            if let Ok(data) = compression::decompress(codec_id, region) {
                let _ = codec::for_each_record(&data, h.records_count, |_| Ok(()));
            }
        }
    }
}

proptest! {
    // a bounded run: a few thousand cases, about a second in release mode
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn round_trip(rows in rows(), codec_id in 0u8..5) {
        let batch = encode(&rows, codec_id);
        let h = codec::parse_header(&batch, 0, true).unwrap();
        prop_assert_eq!(h.records_count as usize, rows.len());
        let data = compression::decompress(codec_id, &batch[codec::HEADER_SIZE..]).unwrap();
        let mut decoded = Vec::new();
        codec::for_each_record(&data, h.records_count, |r| { decoded.push(r.clone().into_owned()); Ok(()) }).unwrap();
        let expected: Vec<_> = rows.iter().enumerate().map(|(i, (k, v, hs, t))| (i as i32, t - 1_000, k.clone(), v.clone(), hs.clone())).collect();
        prop_assert_eq!(decoded, expected);
        if codec_id == 0 {
            let (seen, max_delta) = codec::walk_records(&data).unwrap();
            prop_assert_eq!(seen as usize, rows.len());
            prop_assert_eq!(max_delta, rows.iter().map(|r| r.3 - 1_000).max().unwrap());
        }
    }

    #[test]
    fn mutated_batches_never_panic(rows in rows(), codec_id in 0u8..5,
                                   flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
                                   cut in any::<usize>()) {
        let mut batch = encode(&rows, codec_id);
        for (at, byte) in flips {
            let at = at % batch.len();
            batch[at] ^= byte;
        }
        read_all(&batch);
        let cut = cut % (batch.len() + 1);
        read_all(&batch[..cut]);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300), count in -2i32..40,
                                   codec_id in 0u8..5) {
        let _ = codec::for_each_record(&data, count, |_| Ok(()));
        let _ = codec::walk_records(&data);
        let _ = compression::decompress(codec_id, &data);
        let _ = codec::parse_header(&data, 0, true);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// The leader's stamp, at any place in a buffer: the batch keeps a valid CRC and its records,
    /// takes the base offset always, the epoch when given, the maxTimestamp when given; the CRC
    /// changes only with a maxTimestamp that differs (base offset and epoch are outside its range).
    #[test]
    fn stamp_offset_sets_the_leader_fields_and_keeps_the_crc_valid(
        rows in rows(), codec_id in 0u8..5, lead in 0usize..20, base in any::<i64>(),
        epoch in proptest::option::of(any::<i32>()), max_ts in proptest::option::of(any::<i64>()),
    ) {
        let batch = encode(&rows, codec_id);
        let mut buf = vec![0xAB; lead];
        buf.extend_from_slice(&batch);
        buf.extend_from_slice(&[0xCD; 7]); // what follows the batch is not its own
        codec::stamp_offset(&mut buf, lead, base, epoch, max_ts).unwrap();
        let before = codec::parse_header(&batch, 0, true).unwrap();
        let after = codec::parse_header(&buf, lead, true).unwrap(); // verifies the CRC
        prop_assert_eq!(after.base_offset, base);
        prop_assert_eq!(after.partition_leader_epoch, epoch.unwrap_or(before.partition_leader_epoch));
        prop_assert_eq!(after.max_timestamp, max_ts.unwrap_or(before.max_timestamp));
        prop_assert_eq!(after.crc == before.crc, after.max_timestamp == before.max_timestamp);
        prop_assert_eq!(&buf[..lead], &vec![0xAB; lead][..]);
        prop_assert_eq!(&buf[lead + batch.len()..], &[0xCD; 7][..]);
        prop_assert_eq!(&buf[lead + 43..lead + batch.len()], &batch[43..]); // the records, untouched
    }
}

/// A stamp needs a header, and a new maxTimestamp (whose CRC covers the whole batch) the whole batch.
#[test]
fn stamp_offset_refuses_what_is_not_a_whole_batch() {
    let batch = encode(&[(None, Some(b"v".to_vec()), vec![], 1_003)], 0);
    let mut short = batch[..codec::HEADER_SIZE - 1].to_vec();
    assert!(codec::stamp_offset(&mut short, 0, 5, None, None).is_err());
    let mut header_only = batch[..codec::HEADER_SIZE].to_vec();
    codec::stamp_offset(&mut header_only, 0, 5, Some(1), Some(1_005)).unwrap(); // unchanged: no CRC to compute
    assert!(codec::stamp_offset(&mut header_only, 0, 5, Some(1), Some(2_000)).is_err());
    let mut whole = batch.clone();
    assert!(codec::stamp_offset(&mut whole, batch.len() - codec::HEADER_SIZE + 1, 5, None, None).is_err());
    codec::stamp_offset(&mut whole, 0, 5, None, Some(2_000)).unwrap();
}

/// The core is Python-free: only lib.rs and bindings/ may use PyO3, so the codec stays testable
/// (and reusable) without an interpreter, and every Python conversion lives in one layer.
#[test]
fn the_core_never_uses_pyo3() {
    let core = [
        ("codec.rs", include_str!("codec.rs")),
        ("compression.rs", include_str!("compression.rs")),
        ("encoder.rs", include_str!("encoder.rs")),
        ("batch_builder.rs", include_str!("batch_builder.rs")),
        ("columns.rs", include_str!("columns.rs")),
        ("retain.rs", include_str!("retain.rs")),
        ("format.rs", include_str!("format.rs")),
        ("producer.rs", include_str!("producer.rs")),
        ("high_watermark.rs", include_str!("high_watermark.rs")),
    ];
    for (name, source) in core {
        assert!(!source.contains("pyo3"), "{name} uses pyo3: move the Python part to bindings/");
    }
}

/// offset delta, timestamp delta, key, value, headers: a decoded record that owns its bytes.
type OwnedRecord = (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>, Vec<(Vec<u8>, Option<Vec<u8>>)>);

impl codec::RecordView<'_> {
    fn into_owned(self) -> OwnedRecord {
        (
            self.offset_delta,
            self.timestamp_delta,
            self.key.map(<[u8]>::to_vec),
            self.value.map(<[u8]>::to_vec),
            self.headers.into_iter().map(|(n, v)| (n.to_vec(), v.map(<[u8]>::to_vec))).collect(),
        )
    }
}

// --- encoder.rs: batch splitting, bulk encoding, stamping, murmur2 --------------------------

/// Random records for the encoder's and the batch builder's property tests (one definition).
pub(crate) mod strategies {
    use proptest::prelude::*;

    /// key, value, headers, timestamp.
    pub(crate) type Rec = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<(Vec<u8>, Option<Vec<u8>>)>, i64);

    pub(crate) fn recs() -> impl Strategy<Value = Vec<Rec>> {
        let bytes = proptest::collection::vec(any::<u8>(), 0..200);
        let header = (proptest::collection::vec(any::<u8>(), 0..8), proptest::option::of(bytes.clone()));
        proptest::collection::vec(
            (
                proptest::option::of(bytes.clone()),
                proptest::option::of(bytes),
                proptest::collection::vec(header, 0..3),
                -100_000i64..100_000,
            ),
            1..40,
        )
    }
}

mod encoder_tests {
    use proptest::prelude::*;

    use super::strategies::{recs, Rec};
    use crate::codec::{self, HeaderIn, RecordIn};
    use crate::compression;
    use crate::encoder::{self, Columns, EncodeOptions, Span, Timestamps};

    /// Owned columns, and `Columns` borrowing them.
    struct Owned {
        values: Vec<Option<Vec<u8>>>,
        keys: Vec<Option<Vec<u8>>>,
        headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        ends: Vec<usize>,
        timestamps: Vec<i64>,
    }

    fn owned(recs: &[Rec]) -> Owned {
        let mut headers = Vec::new();
        let mut ends = Vec::new();
        for r in recs {
            headers.extend(r.2.iter().cloned());
            ends.push(headers.len());
        }
        Owned {
            values: recs.iter().map(|r| r.1.clone()).collect(),
            keys: recs.iter().map(|r| r.0.clone()).collect(),
            headers,
            ends,
            timestamps: recs.iter().map(|r| r.3).collect(),
        }
    }

    fn with_columns<R>(o: &Owned, f: impl FnOnce(&Columns) -> R) -> R {
        let values: Vec<Option<&[u8]>> = o.values.iter().map(|v| v.as_deref()).collect();
        let keys: Vec<Option<&[u8]>> = o.keys.iter().map(|v| v.as_deref()).collect();
        let headers: Vec<HeaderIn> = o.headers.iter().map(|(n, v)| (n.as_slice(), v.as_deref())).collect();
        f(&Columns {
            values: &values,
            keys: Some(&keys),
            headers: &headers,
            header_ends: Some(&o.ends),
            timestamps: Timestamps::Each(o.timestamps.clone()),
        })
    }

    /// The records region of recs[start..end] in a batch of its own, by the plain encoder.
    fn region(recs: &[Rec], start: usize, end: usize) -> Vec<u8> {
        let records: Vec<RecordIn> = recs[start..end]
            .iter()
            .map(|(k, v, h, t)| RecordIn {
                key: k.as_deref(),
                value: v.as_deref(),
                headers: h.iter().map(|(n, v)| (n.as_slice(), v.as_deref())).collect(),
                timestamp: *t,
            })
            .collect();
        let mut out = Vec::new();
        codec::encode_records(&mut out, &records, recs[start].3).unwrap();
        out
    }

    /// BatchBuilder's rule, by measuring actually encoded prefixes: a record joins the batch
    /// unless the batch is non-empty and header + records would pass max_bytes.
    fn reference_split(recs: &[Rec], max_bytes: i64) -> Vec<(usize, usize)> {
        let mut spans = Vec::new();
        let mut start = 0;
        let mut end = 0;
        while end < recs.len() {
            if end > start && (codec::HEADER_SIZE + region(recs, start, end + 1).len()) as i64 > max_bytes {
                spans.push((start, end));
                start = end;
            }
            end += 1;
        }
        spans.push((start, end));
        spans
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn splits_where_the_builder_does_and_round_trips(recs in recs(), max_bytes in 0i64..3_000,
                                                         codec_id in 0u8..5, transactional in any::<bool>()) {
            let o = owned(&recs);
            let opts = EncodeOptions { max_bytes, codec: codec_id, is_transactional: transactional };
            let batches = with_columns(&o, |cols| encoder::encode_batches(cols, &opts)).unwrap();
            let spans: Vec<(usize, usize)> = batches.iter().map(|(s, _)| (s.start, s.end)).collect();
            prop_assert_eq!(spans, reference_split(&recs, max_bytes));
            for (span, data) in &batches {
                let h = codec::parse_header(data, 0, true).unwrap();
                prop_assert_eq!(data.len(), h.batch_length as usize + codec::LOG_OVERHEAD);
                prop_assert_eq!(h.records_count as usize, span.record_count());
                prop_assert_eq!(h.attributes, codec_id as i16 | if transactional { 0x10 } else { 0 });
                prop_assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence, h.base_offset), (-1, -1, -1, 0));
                prop_assert_eq!(h.base_timestamp, recs[span.start].3);
                prop_assert_eq!(h.max_timestamp, recs[span.start..span.end].iter().map(|r| r.3).max().unwrap());
                let inflated = compression::decompress(codec_id, &data[codec::HEADER_SIZE..]).unwrap();
                prop_assert_eq!(&inflated, &region(&recs, span.start, span.end));
                prop_assert_eq!(span.size, codec::HEADER_SIZE + inflated.len());
            }
        }

        #[test]
        fn record_sizes_are_the_encoded_sizes(recs in recs(), offset_delta in 0i32..i32::MAX,
                                              delta in any::<i64>()) {
            for (k, v, h, _) in &recs {
                let headers: Vec<HeaderIn> = h.iter().map(|(n, v)| (n.as_slice(), v.as_deref())).collect();
                let body = codec::record_body_size(offset_delta, delta, k.as_deref(), v.as_deref(), &headers);
                let mut out = Vec::new();
                codec::put_record(&mut out, offset_delta, delta, k.as_deref(), v.as_deref(), &headers, body).unwrap();
                prop_assert_eq!(out.len(), codec::record_size(body));
                let mut r = codec::Reader::new(&out);
                let rec = codec::next_record(&mut r).unwrap();
                prop_assert_eq!(r.pos, out.len());
                prop_assert_eq!((rec.offset_delta, rec.timestamp_delta, rec.key, rec.value),
                                (offset_delta, delta, k.as_deref(), v.as_deref()));
            }
        }

        #[test]
        fn a_stamp_keeps_the_crc_valid(recs in recs(), codec_id in 0u8..5, pid in any::<i64>(),
                                       epoch in any::<i16>(), seq in any::<i32>()) {
            let o = owned(&recs);
            let opts = EncodeOptions { max_bytes: i64::MAX, codec: codec_id, is_transactional: false };
            let (_, mut data) = with_columns(&o, |cols| encoder::encode_batches(cols, &opts)).unwrap().remove(0);
            let before = data.clone();
            encoder::stamp(&mut data, pid, epoch, seq).unwrap();
            let h = codec::parse_header(&data, 0, true).unwrap();
            prop_assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (pid, epoch, seq));
            prop_assert_eq!(&data[codec::HEADER_SIZE..], &before[codec::HEADER_SIZE..]);
        }
    }

    #[test]
    fn the_exact_fit_stays_and_one_byte_less_splits() {
        let recs: Vec<Rec> = (0..3).map(|_| (None, Some(vec![7u8; 100]), vec![], 5)).collect();
        let o = owned(&recs);
        let plan = |max_bytes| {
            with_columns(&o, |cols| {
                encoder::plan(cols, &EncodeOptions { max_bytes, codec: 0, is_transactional: false })
            })
            .unwrap()
        };
        let whole: Vec<Span> = plan(i64::MAX);
        assert_eq!(whole.len(), 1);
        let exact = whole[0].size as i64;
        assert_eq!(plan(exact).len(), 1);
        assert_eq!(plan(exact - 1).iter().map(Span::record_count).collect::<Vec<_>>(), vec![2, 1]);
        assert_eq!(plan(0).len(), 3); // each first record is accepted whatever the limit
    }

    #[test]
    fn columns_of_different_lengths_are_refused() {
        let values: Vec<Option<&[u8]>> = vec![None, None];
        let keys: Vec<Option<&[u8]>> = vec![None];
        let cols = Columns {
            values: &values,
            keys: Some(&keys),
            headers: &[],
            header_ends: None,
            timestamps: Timestamps::All(0),
        };
        let opts = EncodeOptions { max_bytes: 100, codec: 0, is_transactional: false };
        assert!(matches!(encoder::plan(&cols, &opts), Err(codec::CodecError::Value(_))));
        let cols =
            Columns { values: &values, keys: None, headers: &[], header_ends: None, timestamps: Timestamps::All(0) };
        assert!(matches!(encoder::plan(&cols, &EncodeOptions { codec: 5, ..opts }), Err(codec::CodecError::Value(_))));
    }

    fn one_batch(value: &[u8]) -> Vec<u8> {
        let values: Vec<Option<&[u8]>> = vec![Some(value)];
        let cols =
            Columns { values: &values, keys: None, headers: &[], header_ends: None, timestamps: Timestamps::All(1) };
        let opts = EncodeOptions { max_bytes: i64::MAX, codec: 0, is_transactional: false };
        encoder::encode_batches(&cols, &opts).unwrap().remove(0).1
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// The CRC update equals a full recompute for any batch size and any old and new ids.
        #[test]
        fn an_updated_crc_is_the_recomputed_crc(value in proptest::collection::vec(any::<u8>(), 0..5_000),
                                                 old in (any::<i64>(), any::<i16>(), any::<i32>()),
                                                 new in (any::<i64>(), any::<i16>(), any::<i32>())) {
            let mut data = one_batch(&value);
            codec::set_producer(&mut data, old.0, old.1, old.2);
            let mut recomputed = data.clone();
            codec::set_producer(&mut recomputed, new.0, new.1, new.2);
            encoder::stamp(&mut data, new.0, new.1, new.2).unwrap();
            prop_assert_eq!(data, recomputed);
        }

        /// A stamp carries damage through: the CRC still disagrees with the damaged bytes.
        #[test]
        fn a_stamp_never_blesses_damage(value in proptest::collection::vec(any::<u8>(), 1..2_000),
                                        at in any::<usize>(), flip in 1u8..=255) {
            let mut data = one_batch(&value);
            let at = codec::HEADER_SIZE + at % (data.len() - codec::HEADER_SIZE);
            data[at] ^= flip;
            encoder::stamp(&mut data, 1, 2, 3).unwrap();
            prop_assert!(codec::parse_header(&data, 0, true).is_err());
        }
    }

    #[test]
    fn a_stamp_refuses_partial_batches() {
        let data = one_batch(b"abc");
        let mut longer = data.clone();
        longer.push(0);
        assert!(matches!(encoder::stamp(&mut longer, 1, 1, 1), Err(codec::CodecError::Value(_))));
        assert!(encoder::stamp(&mut data[..20].to_vec(), 1, 1, 1).is_err());
        let mut wrong_magic = data.clone();
        wrong_magic[16] = 1;
        assert!(matches!(encoder::stamp(&mut wrong_magic, 1, 1, 1), Err(codec::CodecError::Corrupt { .. })));
    }

    /// Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
    #[test]
    fn murmur2_matches_kafka_utils_test() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
            (b"abc", 479470107),
        ];
        for (key, expected) in cases {
            assert_eq!(encoder::murmur2(key), expected, "{key:?}");
        }
        // kafka-python's test_partitioner.py, from Kafka's partitioner: key -> partition among 1000
        let placed: [(&[u8], u32); 6] =
            [(b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742)];
        for (key, partition) in placed {
            assert_eq!(encoder::murmur2_partition(key, 1000), partition, "{key:?}");
        }
    }
}

// --- the header's record rules and the Arrow columns (columns.rs) ----------------------------

mod column_tests {
    use crate::codec::{self, CodecError, RecordIn};
    use crate::columns::{RecordColumns, Span, Wanted};
    use crate::compression;

    /// A batch of `count` records (values 0, 1, ...; the second record null-keyed), timestamps
    /// 1_000 + index, base offset 10, producer sequence 3, and the given attributes.
    fn batch(count: usize, attributes: i16) -> Vec<u8> {
        let values: Vec<Vec<u8>> = (0..count).map(|i| vec![i as u8]).collect();
        let records: Vec<RecordIn> = values
            .iter()
            .enumerate()
            .map(|(i, v)| RecordIn {
                key: (i != 1).then_some(b"k".as_slice()),
                value: Some(v),
                headers: vec![(b"h".as_slice(), None)],
                timestamp: 1_000 + i as i64,
            })
            .collect();
        let mut payload = Vec::new();
        codec::encode_records(&mut payload, &records, 1_000).unwrap();
        let payload = compression::compress((attributes & 7) as u8, &payload).unwrap();
        let fields = codec::BatchFields {
            base_offset: 10,
            partition_leader_epoch: 0,
            attributes,
            base_timestamp: 1_000,
            max_timestamp: 5_000,
            producer_id: 7,
            producer_epoch: 1,
            base_sequence: 3,
        };
        codec::assemble(&payload, records.len(), &fields).unwrap()
    }

    fn int64s(bytes: &[u8]) -> Vec<i64> {
        bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
    }

    fn int32s(bytes: &[u8]) -> Vec<i32> {
        bytes.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    #[test]
    fn log_append_time_gives_every_record_the_max_timestamp() {
        let create = codec::parse_header(&batch(3, 0), 0, true).unwrap().record_base();
        assert_eq!((create.timestamp, create.use_deltas), (1_000, true));
        let appended = codec::parse_header(&batch(3, 0x08), 0, true).unwrap().record_base();
        assert_eq!((appended.timestamp, appended.use_deltas), (5_000, false));
        let mut columns = RecordColumns::default();
        let data = batch(3, 0x08 | compression::GZIP as i16);
        columns.add(&data, 0, &codec::parse_header(&data, 0, true).unwrap(), i64::MIN, i64::MAX).unwrap();
        assert_eq!(int64s(columns.timestamp()), vec![5_000; 3]);
    }

    #[test]
    fn columns_hold_the_records_between_the_offsets() {
        let data = batch(4, compression::LZ4 as i16);
        let header = codec::parse_header(&data, 0, true).unwrap();
        let mut columns = RecordColumns::default();
        assert_eq!(columns.add(&data, 0, &header, 11, 13).unwrap(), 2);
        assert_eq!(int64s(columns.offset()), vec![11, 12]);
        assert_eq!(int64s(columns.timestamp()), vec![1_001, 1_002]);
        assert_eq!(int32s(columns.sequence()), vec![4, 5]);
        assert_eq!(columns.key().validity(), Some([0b10].as_slice())); // offset 11's key is null
        assert_eq!((columns.key().nulls(), columns.value().data()), (1, [1, 2].as_slice()));
        assert_eq!(int32s(&columns.header_offsets()), vec![0, 1, 2]);
        assert_eq!(columns.header_key().data(), b"hh");
    }

    #[test]
    fn a_corrupt_batch_adds_nothing_and_is_not_counted() {
        let good = batch(3, 0);
        let header = codec::parse_header(&good, 0, true).unwrap();
        let mut bad = good.clone();
        let last = bad.len() - 1;
        bad[last] = 0x7E; // the last record's null header value becomes 63 bytes: past the region's end
        let mut columns = RecordColumns::default();
        columns.add(&good, 0, &header, i64::MIN, i64::MAX).unwrap();
        assert_eq!(columns.add(&bad, 0, &header, i64::MIN, i64::MAX), Err(CodecError::Truncated));
        columns.add(&good, 0, &header, i64::MIN, i64::MAX).unwrap();
        assert_eq!((columns.rows(), columns.batches()), (6, 2));
        assert_eq!(int32s(columns.batch_index()), vec![0, 0, 0, 1, 1, 1]);
        assert_eq!(int32s(&columns.header_offsets()), vec![0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(columns.key().validity(), Some([0b101101].as_slice()));
    }

    #[test]
    fn only_the_wanted_columns_are_filled() {
        let data = batch(4, 0);
        let header = codec::parse_header(&data, 0, true).unwrap();
        let mut columns = RecordColumns::with_columns(Wanted::from_names(["value", "offset"]).unwrap());
        assert_eq!(columns.add(&data, 0, &header, i64::MIN, i64::MAX).unwrap(), 4);
        assert_eq!(int64s(columns.offset()), vec![10, 11, 12, 13]);
        assert_eq!(columns.value().data(), [0, 1, 2, 3].as_slice());
        assert!(columns.timestamp().is_empty() && columns.key().data().is_empty());
        assert!(columns.batch_index().is_empty() && columns.header_key().data().is_empty());
        assert_eq!(int32s(&columns.header_offsets()), vec![0]);
        assert!(matches!(Wanted::from_names(["vaule"]), Err(CodecError::Value(m)) if m.contains("vaule")));
        let taken = columns.take();
        assert_eq!((taken.rows(), columns.rows(), columns.batches()), (4, 0, 0));
    }

    #[test]
    fn add_all_stops_at_the_first_corrupt_batch_keeping_the_earlier_ones() {
        let good = batch(3, 0);
        let header = codec::parse_header(&good, 0, true).unwrap();
        let mut bad = good.clone();
        let last = bad.len() - 1;
        bad[last] = 0x7E;
        let span = |buf| Span { buf, position: 0, header };
        let mut columns = RecordColumns::default();
        assert_eq!(columns.add_all(&[span(&good), span(&good)], 11, i64::MAX).unwrap(), 4);
        let result = columns.add_all(&[span(&good), span(&bad), span(&good)], i64::MIN, i64::MAX);
        assert_eq!(result, Err(CodecError::Truncated));
        assert_eq!((columns.rows(), columns.batches()), (7, 3));
    }

    #[test]
    fn a_header_whose_batch_its_buffer_cannot_hold_is_a_value_error() {
        let data = batch(2, 0);
        let header = codec::parse_header(&data, 0, true).unwrap();
        let mut owned = Vec::new();
        let short = &data[..data.len() - 1];
        assert!(matches!(codec::records_region(short, 0, &header, &mut owned), Err(CodecError::Value(_))));
        assert!(matches!(codec::records_region(&data, usize::MAX, &header, &mut owned), Err(CodecError::Value(_))));
        assert_eq!(codec::records_region(&data, 0, &header, &mut owned).unwrap(), &data[codec::HEADER_SIZE..]);
    }
}

/// Kafka's varint reading as one plain loop (at most `groups` base-128 groups, bits past 64
/// dropped): what `Reader`'s inlined one- and two-group reads and its long path must agree with.
/// None where the bytes end inside the number or it has too many groups.
fn plain_unsigned(data: &[u8], groups: u32) -> Option<(u64, usize)> {
    let mut raw = 0u64;
    for (i, &b) in data.iter().enumerate().take(groups as usize) {
        let shift = 7 * i as u32;
        if shift < 64 {
            raw |= ((b & 0x7F) as u64) << shift;
        }
        if b < 0x80 {
            return Some((raw, i + 1));
        }
    }
    None
}

proptest! {
    #[test]
    fn varints_read_as_the_plain_loop_reads_them(
        data in proptest::collection::vec(any::<u8>(), 0..13),
        start in 0usize..3,
    ) {
        let start = start.min(data.len());
        let mut r = codec::Reader { data: &data, pos: start };
        match (r.varint(), plain_unsigned(&data[start..], 5)) {
            (Ok(value), Some((raw, used))) => {
                let raw = raw as u32;
                prop_assert_eq!(value, ((raw >> 1) as i32) ^ -((raw & 1) as i32));
                prop_assert_eq!(r.pos, start + used);
            }
            (Err(_), None) => {}
            (got, want) => prop_assert!(false, "varint {:?} against {:?} at {} of {:?}", got, want, start, data),
        }
        let mut r = codec::Reader { data: &data, pos: start };
        match (r.varlong(), plain_unsigned(&data[start..], 10)) {
            (Ok(value), Some((raw, used))) => {
                prop_assert_eq!(value, ((raw >> 1) as i64) ^ -((raw & 1) as i64));
                prop_assert_eq!(r.pos, start + used);
            }
            (Err(_), None) => {}
            (got, want) => prop_assert!(false, "varlong {:?} against {:?} at {} of {:?}", got, want, start, data),
        }
    }
}
