//! Property tests: no input makes the codec panic, and what it encodes it decodes back.
//! Bounded (proptest's default case count) so `cargo test` stays a few seconds.

use proptest::prelude::*;

use crate::codec::{self, BatchFields, RecordIn};
use crate::compression;

fn fields(attributes: i16) -> BatchFields {
    BatchFields { base_offset: 10, partition_leader_epoch: 0, attributes, base_timestamp: 1_000,
                  max_timestamp: 1_005, producer_id: 7, producer_epoch: 1, base_sequence: 3 }
}

type Row = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<(Vec<u8>, Option<Vec<u8>>)>, i64);

fn rows() -> impl Strategy<Value = Vec<Row>> {
    let bytes = proptest::collection::vec(any::<u8>(), 0..40);
    let header = (proptest::collection::vec(any::<u8>(), 0..8), proptest::option::of(bytes.clone()));
    proptest::collection::vec(
        (proptest::option::of(bytes.clone()), proptest::option::of(bytes),
         proptest::collection::vec(header, 0..3), 1_000i64..1_005),
        1..20)
}

fn encode(rows: &[Row], codec: u8) -> Vec<u8> {
    let records: Vec<RecordIn> = rows.iter().map(|(k, v, h, t)| RecordIn {
        key: k.as_deref(), value: v.as_deref(),
        headers: h.iter().map(|(n, v)| (n.as_slice(), v.as_deref())).collect(), timestamp: *t,
    }).collect();
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

impl codec::RecordView<'_> {
    fn into_owned(self) -> (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>, Vec<(Vec<u8>, Option<Vec<u8>>)>) {
        (self.offset_delta, self.timestamp_delta, self.key.map(<[u8]>::to_vec), self.value.map(<[u8]>::to_vec),
         self.headers.into_iter().map(|(n, v)| (n.to_vec(), v.map(<[u8]>::to_vec))).collect())
    }
}
