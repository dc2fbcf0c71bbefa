//! Kafka's console-consumer text formatter (`DefaultMessageFormatter`), for `txlog consume`.
//!
//! cli/consume.py's `_KafkaFormatter` is the reference: it decides the options (the
//! `print.*` flags, the separators, the null literal, `--value-format`) and keeps a Python
//! writer of the same bytes for what is not handled here (ISO timestamps). This core only
//! appends one record's line to a buffer, so a poll's records become one write; it never
//! touches Python (bindings/format.rs does), and tests.rs checks it against a plain model.
//!
//! A line is the shown fields joined by the key separator, followed by the line separator:
//! `CreateTime:TS`, `Partition:P`, `Offset:O`, the headers (`name:value` joined by the headers
//! separator, or `NO_HEADERS`), the key, the value. A missing key or value is the null
//! literal; keys and values go through `--value-format` (utf8: the bytes as they are), header
//! values never do, as in Kafka's formatter.

/// `--value-format`: how a key or value is written (cli/record_format.py's `encode_value`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueFormat {
    Utf8,
    Base64,
    Hex,
}

impl ValueFormat {
    /// The option's spelling, as cli/record_format.py's `ValueFormat` values.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "utf8" => Some(Self::Utf8),
            "base64" => Some(Self::Base64),
            "hex" => Some(Self::Hex),
            _ => None,
        }
    }
}

/// The formatter's options, fixed for a whole run.
#[derive(Clone, Debug)]
pub struct ConsoleFormat {
    pub print_timestamp: bool,
    pub print_partition: bool,
    pub print_offset: bool,
    pub print_headers: bool,
    pub print_key: bool,
    pub print_value: bool,
    pub key_separator: Vec<u8>,
    pub line_separator: Vec<u8>,
    pub headers_separator: Vec<u8>,
    pub null_literal: Vec<u8>,
    pub value_format: ValueFormat,
}

/// The parts of one record a line may show.
pub struct Fields<'a> {
    /// The timestamp type's Kafka name (`CreateTime`, `LogAppendTime`).
    pub timestamp_kind: &'a [u8],
    /// Timestamps and offsets are exact past 64 bits (a damaged header may hold any base).
    pub timestamp: i128,
    pub partition: i64,
    pub offset: i128,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [(&'a [u8], Option<&'a [u8]>)],
}

impl ConsoleFormat {
    /// Append the record's line and the line separator to `out`.
    pub fn write(&self, out: &mut Vec<u8>, f: &Fields) {
        let mut first = true;
        let mut field = |out: &mut Vec<u8>| {
            if !first {
                out.extend_from_slice(&self.key_separator);
            }
            first = false;
        };
        if self.print_timestamp {
            field(out);
            out.extend_from_slice(f.timestamp_kind);
            out.push(b':');
            push_int(out, f.timestamp);
        }
        if self.print_partition {
            field(out);
            out.extend_from_slice(b"Partition:");
            push_int(out, f.partition as i128);
        }
        if self.print_offset {
            field(out);
            out.extend_from_slice(b"Offset:");
            push_int(out, f.offset);
        }
        if self.print_headers {
            field(out);
            self.write_headers(out, f.headers);
        }
        if self.print_key {
            field(out);
            self.write_data(out, f.key);
        }
        if self.print_value {
            field(out);
            self.write_data(out, f.value);
        }
        out.extend_from_slice(&self.line_separator);
    }

    fn write_headers(&self, out: &mut Vec<u8>, headers: &[(&[u8], Option<&[u8]>)]) {
        if headers.is_empty() {
            out.extend_from_slice(b"NO_HEADERS");
            return;
        }
        for (i, (name, value)) in headers.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(&self.headers_separator);
            }
            out.extend_from_slice(name);
            out.push(b':');
            out.extend_from_slice(value.unwrap_or(&self.null_literal));
        }
    }

    fn write_data(&self, out: &mut Vec<u8>, data: Option<&[u8]>) {
        match data {
            None => out.extend_from_slice(&self.null_literal),
            Some(d) => encode_value(out, d, self.value_format),
        }
    }
}

/// `n` in decimal, as Python's `str(int)`.
fn push_int(out: &mut Vec<u8>, n: i128) {
    let mut digits = [0u8; 40];
    let mut at = digits.len();
    let mut rest = n.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if n < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[at..]);
}

const HEX: &[u8; 16] = b"0123456789abcdef";
const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A key or value as `--value-format` writes it: as is, lower-case hex (`bytes.hex()`), or
/// standard padded base64 (`base64.b64encode`).
pub fn encode_value(out: &mut Vec<u8>, data: &[u8], format: ValueFormat) {
    match format {
        ValueFormat::Utf8 => out.extend_from_slice(data),
        ValueFormat::Hex => {
            out.reserve(data.len() * 2);
            for &b in data {
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 15) as usize]);
            }
        }
        ValueFormat::Base64 => push_base64(out, data),
    }
}

fn push_base64(out: &mut Vec<u8>, data: &[u8]) {
    out.reserve(data.len().div_ceil(3) * 4);
    let mut chunks = data.chunks_exact(3);
    for c in &mut chunks {
        let n = (c[0] as u32) << 16 | (c[1] as u32) << 8 | c[2] as u32;
        out.extend_from_slice(&[
            BASE64[(n >> 18) as usize & 63],
            BASE64[(n >> 12) as usize & 63],
            BASE64[(n >> 6) as usize & 63],
            BASE64[n as usize & 63],
        ]);
    }
    match *chunks.remainder() {
        [a] => {
            let n = (a as u32) << 16;
            out.extend_from_slice(&[BASE64[(n >> 18) as usize & 63], BASE64[(n >> 12) as usize & 63], b'=', b'=']);
        }
        [a, b] => {
            let n = (a as u32) << 16 | (b as u32) << 8;
            out.extend_from_slice(&[
                BASE64[(n >> 18) as usize & 63],
                BASE64[(n >> 12) as usize & 63],
                BASE64[(n >> 6) as usize & 63],
                b'=',
            ]);
        }
        _ => {}
    }
}

/// `txlog inspect --print-data-log`'s record lines (kafka-dump-log's), for data batches.
///
/// cli/dump_log.py's `record_lines` is the reference; this covers its common case, Kafka's
/// default StringDecoder over keys and values that are valid UTF-8 (which Java's
/// `new String(bytes, UTF_8)` shows as they are). A record it cannot show returns false, and
/// the caller formats the whole batch in Python instead.
#[derive(Clone, Copy, Debug)]
pub struct DumpFormat {
    pub skip_metadata: bool,
    pub print_data: bool,
}

/// The parts of one record a kafka-dump-log line shows.
pub struct DumpFields<'a> {
    pub offset: i128,
    pub timestamp_kind: &'a [u8],
    pub timestamp: i128,
    pub sequence: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Header names as the decoded record holds them (invalid UTF-8 already replaced).
    pub header_names: &'a [&'a [u8]],
}

impl DumpFormat {
    /// Append the record's line (no newline) to `out`; false, with `out` to be discarded, when
    /// its key or value is not UTF-8 (Java's replacement rules are the Python reference's).
    pub fn write(&self, out: &mut Vec<u8>, f: &DumpFields) -> bool {
        if !self.skip_metadata {
            out.extend_from_slice(b"| offset: ");
            push_int(out, f.offset);
            out.push(b' ');
            out.extend_from_slice(f.timestamp_kind);
            out.extend_from_slice(b": ");
            push_int(out, f.timestamp);
            out.extend_from_slice(b" keySize: ");
            push_int(out, f.key.map_or(-1, |k| k.len() as i128));
            out.extend_from_slice(b" valueSize: ");
            push_int(out, f.value.map_or(-1, |v| v.len() as i128));
            out.extend_from_slice(b" sequence: ");
            push_int(out, f.sequence as i128);
            out.extend_from_slice(b" headerKeys: [");
            out.extend_from_slice(&f.header_names.join(&b","[..]));
            out.push(b']');
        }
        if self.print_data {
            if let Some(key) = f.key {
                if std::str::from_utf8(key).is_err() {
                    return false;
                }
                out.extend_from_slice(if self.skip_metadata { b"| key: " } else { b" key: " });
                out.extend_from_slice(key);
            }
            if let Some(value) = f.value {
                if std::str::from_utf8(value).is_err() {
                    return false;
                }
                out.extend_from_slice(b" payload: ");
                out.extend_from_slice(value);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(data: &[u8], format: ValueFormat) -> Vec<u8> {
        let mut out = Vec::new();
        encode_value(&mut out, data, format);
        out
    }

    #[test]
    fn base64_is_rfc_4648s_with_padding() {
        let vectors: [(&[u8], &[u8]); 7] = [
            (b"", b""),
            (b"f", b"Zg=="),
            (b"fo", b"Zm8="),
            (b"foo", b"Zm9v"),
            (b"foob", b"Zm9vYg=="),
            (b"fooba", b"Zm9vYmE="),
            (b"foobar", b"Zm9vYmFy"),
        ];
        for (data, text) in vectors {
            assert_eq!(encoded(data, ValueFormat::Base64), text);
        }
        assert_eq!(encoded(&[0xfb, 0xff, 0xbf], ValueFormat::Base64), b"+/+/");
    }

    #[test]
    fn hex_is_lower_case_and_utf8_is_the_bytes() {
        assert_eq!(encoded(&[0x00, 0xab, 0xff, 0x10], ValueFormat::Hex), b"00abff10");
        assert_eq!(encoded(&[0xff, b'\n'], ValueFormat::Utf8), [0xff, b'\n']);
    }

    #[test]
    fn integers_print_as_python_prints_them() {
        for n in [0i128, 7, -7, i64::MAX as i128, i64::MIN as i128, i64::MAX as i128 * 3, i128::MIN, i128::MAX] {
            let mut out = Vec::new();
            push_int(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }

    #[test]
    fn a_line_joins_the_shown_fields() {
        let format = ConsoleFormat {
            print_timestamp: true,
            print_partition: true,
            print_offset: true,
            print_headers: true,
            print_key: true,
            print_value: true,
            key_separator: b"|".to_vec(),
            line_separator: b"\r\n".to_vec(),
            headers_separator: b";".to_vec(),
            null_literal: b"NULL".to_vec(),
            value_format: ValueFormat::Utf8,
        };
        let headers: [(&[u8], Option<&[u8]>); 2] = [(b"a", Some(b"1")), (b"b", None)];
        let fields = Fields {
            timestamp_kind: b"CreateTime",
            timestamp: 5,
            partition: 2,
            offset: 9,
            key: None,
            value: Some(b"v"),
            headers: &headers,
        };
        let mut out = Vec::new();
        format.write(&mut out, &fields);
        assert_eq!(out, b"CreateTime:5|Partition:2|Offset:9|a:1;b:NULL|NULL|v\r\n");
        let bare = ConsoleFormat { print_timestamp: false, print_partition: false, print_offset: false, ..format };
        out.clear();
        bare.write(&mut out, &Fields { headers: &[], ..fields });
        assert_eq!(out, b"NO_HEADERS|NULL|v\r\n");
    }
}
