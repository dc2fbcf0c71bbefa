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

/// `txlog consume --output jsonl|csv`: one row per record.
///
/// cli/consume.py's `_Rows` (through cli/output.py's `RowWriter`) is the reference: a row holds
/// the topic, partition, offset, timestamp (epoch ms), key, value and headers. jsonl is
/// `json.dumps(row, ensure_ascii=False, separators=(", ", ": "))` and a newline; csv is the
/// excel dialect of Python's csv module with a `\n` line terminator, where the headers are one
/// field (`json.dumps` of the `[name, value]` pairs, or empty) and a missing key or value is an
/// empty field. Keys and values go through `--value-format`; utf8 shows bytes that are not
/// UTF-8 with U+FFFD (`bytes.decode(errors="replace")`), and `write` says when it did, for the
/// CLI's note. Header values are always UTF-8 text, replaced alike but never noted.
#[derive(Clone, Debug)]
pub struct RowFormat {
    pub style: RowStyle,
    pub value_format: ValueFormat,
    /// The topic's name (a row names its topic; a formatter serves one topic).
    pub topic: String,
}

#[derive(Clone, Debug)]
pub enum RowStyle {
    Jsonl,
    /// `quoted`: the characters that make Python's csv writer quote a field (QUOTE_MINIMAL), as
    /// the running Python's csv module reports them (storage/console_format.py).
    Csv {
        quoted: Vec<u8>,
    },
}

/// The parts of one record a row shows.
pub struct RowFields<'a> {
    pub timestamp: i128,
    pub partition: i64,
    pub offset: i128,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Names as the decoded record holds them (invalid UTF-8 already replaced).
    pub headers: &'a [(&'a [u8], Option<&'a [u8]>)],
}

impl RowFormat {
    /// Append the record's row and its newline to `out`; true when a key or value was not UTF-8
    /// and was shown with U+FFFD.
    pub fn write(&self, out: &mut Vec<u8>, f: &RowFields, scratch: &mut Vec<u8>) -> bool {
        let mut replaced = false;
        match &self.style {
            RowStyle::Jsonl => {
                out.extend_from_slice(b"{\"topic\": ");
                push_json_str(out, self.topic.as_bytes());
                out.extend_from_slice(b", \"partition\": ");
                push_int(out, f.partition as i128);
                out.extend_from_slice(b", \"offset\": ");
                push_int(out, f.offset);
                out.extend_from_slice(b", \"timestamp\": ");
                push_int(out, f.timestamp);
                out.extend_from_slice(b", \"key\": ");
                replaced |= self.json_data(out, f.key, scratch);
                out.extend_from_slice(b", \"value\": ");
                replaced |= self.json_data(out, f.value, scratch);
                out.extend_from_slice(b", \"headers\": ");
                push_json_headers(out, f.headers);
                out.extend_from_slice(b"}\n");
            }
            RowStyle::Csv { quoted } => {
                let csv = |out: &mut Vec<u8>, field: &[u8]| push_csv_field(out, field, quoted);
                csv(out, self.topic.as_bytes());
                out.push(b',');
                scratch.clear();
                push_int(scratch, f.partition as i128);
                out.extend_from_slice(scratch);
                out.push(b',');
                scratch.clear();
                push_int(scratch, f.offset);
                out.extend_from_slice(scratch);
                out.push(b',');
                scratch.clear();
                push_int(scratch, f.timestamp);
                csv(out, scratch);
                for data in [f.key, f.value] {
                    out.push(b',');
                    scratch.clear();
                    if let Some(d) = data {
                        replaced |= self.text(scratch, d);
                    }
                    csv(out, scratch);
                }
                out.push(b',');
                scratch.clear();
                if !f.headers.is_empty() {
                    push_json_headers(scratch, f.headers);
                }
                csv(out, scratch);
                out.push(b'\n');
            }
        }
        replaced
    }

    /// A key or value as a JSON string (or null); true when bytes were replaced.
    fn json_data(&self, out: &mut Vec<u8>, data: Option<&[u8]>, scratch: &mut Vec<u8>) -> bool {
        let Some(d) = data else {
            out.extend_from_slice(b"null");
            return false;
        };
        scratch.clear();
        let replaced = self.text(scratch, d);
        push_json_str(out, scratch);
        replaced
    }

    /// A key or value as text (cli/record_format.py `value_text`), UTF-8 bytes appended to `out`.
    fn text(&self, out: &mut Vec<u8>, data: &[u8]) -> bool {
        match self.value_format {
            ValueFormat::Utf8 => push_lossy(out, data),
            format => {
                encode_value(out, data, format);
                false
            }
        }
    }
}

/// `data` as UTF-8 with U+FFFD for each maximal invalid subpart (Python's errors="replace");
/// true when some bytes were replaced.
fn push_lossy(out: &mut Vec<u8>, data: &[u8]) -> bool {
    match String::from_utf8_lossy(data) {
        std::borrow::Cow::Borrowed(text) => {
            out.extend_from_slice(text.as_bytes());
            false
        }
        std::borrow::Cow::Owned(text) => {
            out.extend_from_slice(text.as_bytes());
            true
        }
    }
}

/// The headers as json.dumps writes `[[name, value], ...]` (default separators), values as
/// UTF-8 text with U+FFFD (never noted: cli/record_format.py `header_text`).
fn push_json_headers(out: &mut Vec<u8>, headers: &[(&[u8], Option<&[u8]>)]) {
    out.push(b'[');
    let mut text = Vec::new();
    for (i, (name, value)) in headers.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.push(b'[');
        push_json_str(out, name);
        out.extend_from_slice(b", ");
        match value {
            None => out.extend_from_slice(b"null"),
            Some(v) => {
                text.clear();
                push_lossy(&mut text, v);
                push_json_str(out, &text);
            }
        }
        out.push(b']');
    }
    out.push(b']');
}

/// A JSON string of UTF-8 `text` as json.dumps(ensure_ascii=False) writes it: `"` `\` and the
/// control characters escaped (`\n` `\r` `\t` `\b` `\f`, the others `\u00XX`), the rest as is.
fn push_json_str(out: &mut Vec<u8>, text: &[u8]) {
    out.reserve(text.len() + 2);
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in text.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&text[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&text[start..]);
    out.push(b'"');
}

/// One csv field as Python's csv writer (QUOTE_MINIMAL, doublequote) writes it: quoted, with
/// `"` doubled, when it holds a character of `quoted`.
fn push_csv_field(out: &mut Vec<u8>, field: &[u8], quoted: &[u8]) {
    if !field.iter().any(|b| quoted.contains(b)) {
        out.extend_from_slice(field);
        return;
    }
    out.push(b'"');
    for &b in field {
        if b == b'"' {
            out.push(b'"');
        }
        out.push(b);
    }
    out.push(b'"');
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
    fn rows_are_pythons_json_and_csv() {
        let headers: [(&[u8], Option<&[u8]>); 2] = [(b"a\"", Some(b"1\xff")), (b"b", None)];
        let fields = RowFields {
            timestamp: -1,
            partition: 3,
            offset: 9,
            key: None,
            value: Some(b"q\"\\\n\r\t\x08\x0c\x01\x7f,\xc3\xbc\xff"),
            headers: &headers,
        };
        let jsonl = RowFormat { style: RowStyle::Jsonl, value_format: ValueFormat::Utf8, topic: "t".into() };
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        assert!(jsonl.write(&mut out, &fields, &mut scratch));
        let expected = "{\"topic\": \"t\", \"partition\": 3, \"offset\": 9, \"timestamp\": -1, \"key\": null, \
                        \"value\": \"q\\\"\\\\\\n\\r\\t\\b\\f\\u0001\x7f,\u{fc}\u{fffd}\", \
                        \"headers\": [[\"a\\\"\", \"1\u{fffd}\"], [\"b\", null]]}\n";
        assert_eq!(String::from_utf8(out).unwrap(), expected);
        let csv =
            RowFormat { style: RowStyle::Csv { quoted: b"\n\",".to_vec() }, value_format: ValueFormat::Hex, ..jsonl };
        let mut out = Vec::new();
        assert!(!csv.write(&mut out, &RowFields { headers: &[], value: Some(b"\x00,"), ..fields }, &mut scratch));
        assert_eq!(out, b"t,3,9,-1,,002c,\n");
        out.clear();
        csv.write(&mut out, &RowFields { value: None, ..fields }, &mut scratch);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "t,3,9,-1,,,\"[[\"\"a\\\"\"\"\", \"\"1\u{fffd}\"\"], [\"\"b\"\", null]]\"\n"
        );
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
