//! The inflation limit (compression::inflation_limit, docs/kafka-formats.md §1.4): every codec
//! stops at it, whatever the stream claims, and gives back everything within it.

use proptest::prelude::*;

use crate::codec::CodecError;
use crate::compression::{self, GZIP, LZ4, NONE, SNAPPY, ZSTD};

const MIB: u64 = 1 << 20;

#[test]
fn the_limit_is_64_times_the_region_and_at_least_64_mib() {
    assert_eq!(compression::inflation_limit(0), 64 * MIB);
    assert_eq!(compression::inflation_limit(MIB as usize), 64 * MIB);
    assert_eq!(compression::inflation_limit(MIB as usize + 1), 64 * (MIB + 1));
    assert_eq!(compression::inflation_limit(usize::MAX), i32::MAX as u64);
}

fn sample(zeros: usize, noise: &[u8]) -> Vec<u8> {
    let mut data = vec![0u8; zeros];
    data.extend_from_slice(noise);
    data
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Within the limit a stream inflates whole; one byte past it, TooLarge - for the copy
    /// the readers keep and for the size the append path counts.
    #[test]
    fn every_codec_stops_exactly_at_the_limit(codec in 1u8..5, zeros in 0usize..200_000,
                                              noise in proptest::collection::vec(any::<u8>(), 0..300),
                                              slack in -3i64..3) {
        let data = sample(zeros, &noise);
        let packed = compression::compress(codec, &data).unwrap();
        let limit = (data.len() as i64 + slack).max(0) as u64;
        let kept = compression::decompress_within(codec, &packed, limit);
        let counted = compression::inflated_size_within(codec, &packed, limit);
        if data.len() as u64 <= limit {
            prop_assert_eq!(kept.unwrap(), data.clone());
            prop_assert_eq!(counted.unwrap(), data.len() as u64);
        } else {
            prop_assert!(matches!(kept, Err(CodecError::TooLarge(_))), "{:?}", kept);
            prop_assert!(matches!(counted, Err(CodecError::TooLarge(_))), "{:?}", counted);
        }
    }

    /// What a reader would refuse, the append path's count refuses the same way.
    #[test]
    fn counting_agrees_with_inflating(codec in 0u8..5, data in proptest::collection::vec(any::<u8>(), 0..400)) {
        let kept = compression::decompress(codec, &data).map(|d| d.len() as u64);
        let counted = compression::inflated_size(codec, &data);
        prop_assert_eq!(format!("{kept:?}"), format!("{counted:?}"));
    }

    /// The expansion bounds that let the append path skip inflating trusted gzip, lz4 and snappy
    /// hold for the most compressible input there is.
    #[test]
    fn no_codec_expands_past_its_bound(codec in prop::sample::select(vec![GZIP, LZ4, SNAPPY]), zeros in 1usize..4_000_000) {
        let packed = compression::compress(codec, &vec![0u8; zeros]).unwrap();
        let most = compression::max_expansion(codec).unwrap();
        prop_assert!(zeros as u64 <= packed.len() as u64 * most, "{} bytes from {}", zeros, packed.len());
    }
}

/// A bomb: 64 MiB + 1 of zeros from a few KiB. Refused by every codec that can carry one; the
/// same stream one byte shorter is a batch a producer may write, and inflates.
#[test]
fn bombs_are_refused_and_the_largest_legitimate_region_inflates() {
    for codec in [GZIP, LZ4, ZSTD] {
        let limit = 64 * MIB as usize;
        let at_limit = compression::compress(codec, &vec![0u8; limit]).unwrap();
        assert!(
            at_limit.len() < MIB as usize,
            "{} stays under the 64 MiB floor's region size",
            compression::name(codec)
        );
        assert_eq!(compression::decompress(codec, &at_limit).unwrap().len(), limit);
        assert_eq!(compression::inflated_size(codec, &at_limit).unwrap(), limit as u64);
        let past = compression::compress(codec, &vec![0u8; limit + 1]).unwrap();
        let err = compression::decompress(codec, &past).unwrap_err();
        assert!(matches!(err, CodecError::TooLarge(_)), "{}: {err:?}", compression::name(codec));
        assert!(matches!(compression::inflated_size(codec, &past), Err(CodecError::TooLarge(_))));
    }
}

/// Snappy cannot inflate much (about 21 times), so its bomb is a lie in a block's length
/// prefix: refused before the claim is allocated, framed or raw.
#[test]
fn a_snappy_block_claiming_gigabytes_is_refused_unread() {
    let block = compression::compress(SNAPPY, &[0u8; 1000]).unwrap()[compression::XERIAL_MAGIC.len() + 12..].to_vec();
    let mut lying = vec![0x80, 0x80, 0x80, 0x80, 0x07]; // a varint claiming 7 << 28 bytes
    lying.extend_from_slice(&block[2..]); // the block after its own (2-byte) length varint
    for data in [
        lying.clone(),
        [compression::compress(SNAPPY, b"").unwrap(), (lying.len() as i32).to_be_bytes().to_vec(), lying].concat(),
    ] {
        let err = compression::decompress(SNAPPY, &data).unwrap_err();
        assert!(matches!(err, CodecError::Decompress(ref m) if m.contains("claims")), "{err:?}");
    }
}

/// Xerial blocks that each inflate honestly still stop at the limit, before the block that
/// would pass it is inflated.
#[test]
fn xerial_blocks_stop_at_the_limit() {
    let data = vec![7u8; 200_000]; // seven 32 KiB blocks
    let packed = compression::compress(SNAPPY, &data).unwrap();
    assert!(matches!(compression::decompress_within(SNAPPY, &packed, 100_000), Err(CodecError::TooLarge(_))));
    assert_eq!(compression::decompress_within(SNAPPY, &packed, 200_000).unwrap(), data);
}

#[test]
fn uncompressed_regions_have_no_limit_to_check() {
    assert_eq!(compression::inflated_size(NONE, &[1, 2, 3]).unwrap(), 3);
    assert!(!compression::may_exceed_limit(NONE, usize::MAX / 2));
    assert!(compression::may_exceed_limit(ZSTD, 1));
    // 1032 x 65_027 bytes of gzip stay under 64 MiB; one byte more could pass it
    assert!(!compression::may_exceed_limit(GZIP, 65_027));
    assert!(compression::may_exceed_limit(GZIP, 65_028));
}

/// The append path's shortcut for this process's own streams: what `compress` wrote is within
/// the limit by its codec's largest expansion or its zstd content size; anything else (several
/// frames, a frame past the limit) is not vouched for and gets inflated.
#[test]
fn own_streams_are_vouched_for_only_within_the_limit() {
    let small = vec![5u8; 100_000];
    for codec in [GZIP, SNAPPY, LZ4, ZSTD] {
        assert!(compression::own_stream_within_limit(codec, &compression::compress(codec, &small).unwrap()));
    }
    let past = compression::compress(ZSTD, &vec![0u8; 64 * MIB as usize + 1]).unwrap();
    assert!(!compression::own_stream_within_limit(ZSTD, &past));
    let frame = compression::compress(ZSTD, &small).unwrap();
    assert!(!compression::own_stream_within_limit(ZSTD, &[frame.as_slice(), frame.as_slice()].concat()));
    assert!(!compression::own_stream_within_limit(ZSTD, b"not zstd"));
    let gzip_past = compression::compress(GZIP, &vec![0u8; 200 * MIB as usize]).unwrap();
    assert!(!compression::own_stream_within_limit(GZIP, &gzip_past), "{} bytes of gzip", gzip_past.len());
}
