//! The high watermark file's 14 bytes (storage/high_watermark.py describes the file and its role):
//! int16 version (0), int64 HW, uint32 CRC-32C of the 10 bytes before it, big-endian. Encoded here
//! once for both writers of the file: HighWatermarkFile's publish (through storage.high_watermark
//! `encode`) and the quiet append's pwrite (bindings/append.rs).

/// The file's length.
pub const SIZE: usize = 14;
/// The only version written and read.
const VERSION: i16 = 0;
/// What `decode` answers for bytes that hold no valid value (a real HW is never negative).
pub const UNREADABLE: i64 = -1;

/// The file's bytes for `high_watermark`.
pub fn encode(high_watermark: i64) -> [u8; SIZE] {
    let mut out = [0u8; SIZE];
    out[0..2].copy_from_slice(&VERSION.to_be_bytes());
    out[2..10].copy_from_slice(&high_watermark.to_be_bytes());
    let crc = crc32c::crc32c(&out[..10]);
    out[10..14].copy_from_slice(&crc.to_be_bytes());
    out
}

/// The HW `data` holds, or UNREADABLE: short, another version, a CRC that does not match, a
/// negative value. Bytes past the 14th are not the file's (ignored).
pub fn decode(data: &[u8]) -> i64 {
    let Some(file) = data.get(..SIZE) else { return UNREADABLE };
    let version = i16::from_be_bytes([file[0], file[1]]);
    let value = i64::from_be_bytes(file[2..10].try_into().unwrap_or_default());
    let crc = u32::from_be_bytes(file[10..14].try_into().unwrap_or_default());
    if version != VERSION || crc != crc32c::crc32c(&file[..10]) || value < 0 {
        return UNREADABLE;
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A known file, checked byte for byte: the layout stays what stores on disk hold.
    #[test]
    fn encodes_the_documented_layout() {
        let bytes = encode(0x0102_0304_0506_0708);
        assert_eq!(&bytes[..10], &[0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(u32::from_be_bytes(bytes[10..].try_into().unwrap()), crc32c::crc32c(&bytes[..10]));
    }

    proptest! {
        #[test]
        fn every_hw_decodes_back_and_any_damage_reads_unreadable(hw in 0i64.., at in 0usize..SIZE, flip in 1u8..) {
            let bytes = encode(hw);
            prop_assert_eq!(decode(&bytes), hw);
            let mut longer = bytes.to_vec();
            longer.push(9);
            prop_assert_eq!(decode(&longer), hw);
            prop_assert_eq!(decode(&bytes[..SIZE - 1]), UNREADABLE);
            let mut damaged = bytes;
            damaged[at] ^= flip;
            prop_assert_eq!(decode(&damaged), UNREADABLE);
        }

        #[test]
        fn a_negative_value_reads_unreadable(hw in i64::MIN..0) {
            prop_assert_eq!(decode(&encode(hw)), UNREADABLE);
        }
    }
}
