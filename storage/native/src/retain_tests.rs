//! retain.rs: filtering a batch then decoding it gives exactly the kept records, with their
//! own offsets and timestamps, in a batch whose offsets and producer fields are the original's.

use proptest::prelude::*;

use crate::codec::{self, BatchFields, CodecError, RecordIn};
use crate::compression;
use crate::retain::{retain, CONTROL_MASK, DELETE_HORIZON_MASK};
use crate::tests::strategies::{recs, Rec};

const LOG_APPEND_TIME: i16 = codec::TIMESTAMP_TYPE_MASK;

/// An original batch as a producer writes it: offsets 0..n from `base_offset`, the base
/// timestamp the first record's, maxTimestamp the largest (or `append_time` with
/// LOG_APPEND_TIME).
fn original(recs: &[Rec], attributes: i16, append_time: i64) -> Vec<u8> {
    let records: Vec<RecordIn> = recs
        .iter()
        .map(|(k, v, h, t)| RecordIn {
            key: k.as_deref(),
            value: v.as_deref(),
            headers: h.iter().map(|(n, v)| (n.as_slice(), v.as_deref())).collect(),
            timestamp: *t,
        })
        .collect();
    let base_timestamp = recs[0].3;
    let mut region = Vec::new();
    codec::encode_records(&mut region, &records, base_timestamp).unwrap();
    let codec_id = (attributes & codec::COMPRESSION_MASK) as u8;
    let payload = compression::compress(codec_id, &region).unwrap();
    let max_timestamp =
        if attributes & LOG_APPEND_TIME != 0 { append_time } else { recs.iter().map(|r| r.3).max().unwrap() };
    let fields = BatchFields {
        base_offset: 1_000,
        partition_leader_epoch: 4,
        attributes,
        base_timestamp,
        max_timestamp,
        producer_id: 77,
        producer_epoch: 3,
        base_sequence: 12,
    };
    codec::assemble(&payload, records.len(), &fields).unwrap()
}

/// (offset delta, timestamp as readers see it, key, value, headers) of every record.
type Seen = (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>, Vec<(Vec<u8>, Option<Vec<u8>>)>);

fn decode(batch: &[u8]) -> (codec::Header, Vec<Seen>) {
    let header = codec::parse_header(batch, 0, true).expect("a whole batch with a valid CRC");
    assert_eq!(header.size(), batch.len());
    let base = header.record_base();
    let mut owned = Vec::new();
    let data = codec::records_region(batch, 0, &header, &mut owned).unwrap();
    let mut out = Vec::new();
    codec::for_each_record(data, header.records_count, |r| {
        let ts = if base.use_deltas { base.timestamp + r.timestamp_delta } else { base.timestamp };
        out.push((
            r.offset_delta,
            ts,
            r.key.map(<[u8]>::to_vec),
            r.value.map(<[u8]>::to_vec),
            // as Java reads a header key: a String, bad UTF-8 as U+FFFD
            r.headers
                .iter()
                .map(|(n, v)| (String::from_utf8_lossy(n).into_owned().into_bytes(), v.map(<[u8]>::to_vec)))
                .collect(),
        ));
        Ok(())
    })
    .unwrap();
    (header, out)
}

fn attributes() -> impl Strategy<Value = i16> {
    (0u8..=compression::ZSTD, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(c, append, txn, horizon)| {
        c as i16
            | if append { LOG_APPEND_TIME } else { 0 }
            | if txn { codec::TRANSACTIONAL_MASK } else { 0 }
            | if horizon { DELETE_HORIZON_MASK } else { 0 }
    })
}

/// A batch, a keep mask as long as its records, a delete horizon or none.
fn cases() -> impl Strategy<Value = (Vec<Rec>, i16, Vec<u8>, Option<i64>)> {
    (recs(), attributes(), proptest::option::of(-200_000i64..200_000)).prop_flat_map(|(recs, attributes, horizon)| {
        let n = recs.len();
        (Just(recs), Just(attributes), proptest::collection::vec(0u8..3, n), Just(horizon))
    })
}

proptest! {
    #[test]
    fn filter_then_decode_gives_the_kept_records((recs, attributes, keep, horizon) in cases()) {
        let batch = original(&recs, attributes, 123_456);
        let (before, all) = decode(&batch);
        let out = retain(&batch, 0, &keep, horizon).unwrap();
        let (after, kept) = decode(&out);
        let expected: Vec<Seen> = all.iter().zip(&keep).filter(|(_, &k)| k != 0).map(|(r, _)| r.clone()).collect();
        prop_assert_eq!(&kept, &expected);
        prop_assert_eq!(after.base_offset, before.base_offset);
        prop_assert_eq!(after.last_offset_delta, before.last_offset_delta);
        prop_assert_eq!(after.partition_leader_epoch, before.partition_leader_epoch);
        prop_assert_eq!(
            (after.producer_id, after.producer_epoch, after.base_sequence),
            (before.producer_id, before.producer_epoch, before.base_sequence)
        );
        prop_assert_eq!(after.records_count as usize, expected.len());
        if expected.is_empty() {
            // Kafka's writeEmptyHeader: the header alone, codec and delete horizon dropped
            prop_assert_eq!(out.len(), codec::HEADER_SIZE);
            prop_assert_eq!(after.attributes, attributes & (LOG_APPEND_TIME | codec::TRANSACTIONAL_MASK | CONTROL_MASK));
            prop_assert_eq!((after.base_timestamp, after.max_timestamp), (before.max_timestamp, before.max_timestamp));
        } else {
            prop_assert_eq!(after.attributes & !DELETE_HORIZON_MASK, attributes & !DELETE_HORIZON_MASK);
            prop_assert_eq!(after.attributes & DELETE_HORIZON_MASK != 0, horizon.is_some());
            prop_assert_eq!(after.base_timestamp, horizon.unwrap_or(expected[0].1));
            let max = if attributes & LOG_APPEND_TIME != 0 {
                before.max_timestamp
            } else {
                expected.iter().map(|r| r.1).max().unwrap()
            };
            prop_assert_eq!(after.max_timestamp, max);
        }
    }

    #[test]
    fn keeping_every_record_without_a_horizon_rebuilds_the_batch_byte_for_byte(
        (recs, attributes, _keep, _horizon) in cases()
    ) {
        let recs: Vec<Rec> = recs
            .into_iter()
            .map(|(k, v, h, t)| {
                let h = h.into_iter().map(|(n, v)| (String::from_utf8_lossy(&n).into_owned().into_bytes(), v)).collect();
                (k, v, h, t)
            })
            .collect();
        let batch = original(&recs, attributes & !(DELETE_HORIZON_MASK | LOG_APPEND_TIME), 123_456);
        prop_assert_eq!(retain(&batch, 0, &vec![1; recs.len()], None).unwrap(), batch);
    }

    #[test]
    fn a_cleaned_batch_cleaned_again_with_the_same_records_is_unchanged((recs, attributes, keep, horizon) in cases()) {
        let once = retain(&original(&recs, attributes, 9), 0, &keep, horizon).unwrap();
        let count = codec::parse_header(&once, 0, true).unwrap().records_count as usize;
        prop_assert_eq!(retain(&once, 0, &vec![1; count], horizon).unwrap(), once.clone());
    }

    #[test]
    fn no_input_makes_retain_panic(data in proptest::collection::vec(any::<u8>(), 0..300), keep in proptest::collection::vec(any::<u8>(), 0..20)) {
        let _ = retain(&data, 0, &keep, None);
        let _ = retain(&data, 0, &keep, Some(5));
    }
}

#[test]
fn the_batch_is_found_at_its_position_in_a_larger_buffer() {
    let recs: Vec<Rec> = (0..5).map(|i| (Some(vec![i]), Some(vec![i; 3]), vec![], 100 + i as i64)).collect();
    let batch = original(&recs, 0, 0);
    let mut buf = vec![0xEE; 10];
    buf.extend_from_slice(&batch);
    buf.extend_from_slice(&[0xAA; 7]);
    let keep = [0, 1, 0, 0, 1];
    assert_eq!(retain(&buf, 10, &keep, None).unwrap(), retain(&batch, 0, &keep, None).unwrap());
    let (header, kept) = decode(&retain(&batch, 0, &keep, None).unwrap());
    assert_eq!(kept.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 4]);
    assert_eq!((header.base_offset, header.last_offset_delta), (1_000, 4));
}

#[test]
fn a_keep_mask_of_the_wrong_length_is_refused() {
    let recs: Vec<Rec> = (0..3).map(|i| (None, Some(vec![i]), vec![], 0)).collect();
    let batch = original(&recs, 0, 0);
    for keep in [&[1u8, 1][..], &[1, 1, 1, 1][..], &[][..]] {
        assert!(matches!(retain(&batch, 0, keep, None), Err(CodecError::Value(_))), "{keep:?}");
    }
}

#[test]
fn damaged_records_are_reported_not_rewritten() {
    let recs: Vec<Rec> = (0..3).map(|i| (Some(vec![i]), Some(vec![i; 10]), vec![], 0)).collect();
    let mut batch = original(&recs, 0, 0);
    let last = batch.len() - 1;
    batch.truncate(last); // the last record loses a byte, the header still claims it
    let length = (batch.len() - codec::LOG_OVERHEAD) as i32;
    batch[8..12].copy_from_slice(&length.to_be_bytes());
    assert!(retain(&batch, 0, &[1, 0, 1], None).is_err());
}

#[test]
fn a_header_key_that_is_not_utf8_is_written_back_with_the_replacement_character() {
    let recs: Vec<Rec> =
        vec![(Some(b"k".to_vec()), None, vec![(b"tr\xadce".to_vec(), Some(b"v".to_vec())), (b"ok".to_vec(), None)], 5)];
    let out = retain(&original(&recs, 0, 0), 0, &[1], None).unwrap();
    let header = codec::parse_header(&out, 0, true).unwrap();
    let mut owned = Vec::new();
    let data = codec::records_region(&out, 0, &header, &mut owned).unwrap();
    let mut names = Vec::new();
    codec::for_each_record(data, 1, |r| {
        names.extend(r.headers.iter().map(|(n, _)| n.to_vec()));
        Ok(())
    })
    .unwrap();
    assert_eq!(names, vec!["tr\u{fffd}ce".as_bytes().to_vec(), b"ok".to_vec()]);
}
