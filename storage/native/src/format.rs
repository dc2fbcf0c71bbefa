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
    /// `--timestamp-format iso`: timestamps as ISO 8601 UTC text (`push_timestamp`).
    pub iso_timestamps: bool,
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
            push_timestamp(out, f.timestamp, self.iso_timestamps, false);
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

/// The last millisecond ISO 8601 text can show here: 9999-12-31T23:59:59.999Z (Python's
/// datetime ends at year 9999).
const ISO_MAX_MS: i128 = 253_402_300_799_999;

/// A timestamp as `--timestamp-format` prints it (cli/consume.py `iso_timestamp`): epoch ms,
/// or with `iso` the ISO 8601 UTC text (in `"` when `quoted`, for JSON); a timestamp ISO text
/// cannot show (negative: none was given, or past year 9999) stays epoch ms, unquoted.
fn push_timestamp(out: &mut Vec<u8>, ms: i128, iso: bool, quoted: bool) {
    if !iso || !(0..=ISO_MAX_MS).contains(&ms) {
        push_int(out, ms);
        return;
    }
    if quoted {
        out.push(b'"');
    }
    push_iso(out, ms as i64);
    if quoted {
        out.push(b'"');
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` of 0 <= `ms` <= ISO_MAX_MS, exact (whole milliseconds, no float).
fn push_iso(out: &mut Vec<u8>, ms: i64) {
    let (days, in_day) = (ms / 86_400_000, ms % 86_400_000);
    let (year, month, day) = civil_from_days(days);
    let fields = [
        (year, 4, b'-'),
        (month, 2, b'-'),
        (day, 2, b'T'),
        (in_day / 3_600_000, 2, b':'),
        (in_day / 60_000 % 60, 2, b':'),
        (in_day / 1000 % 60, 2, b'.'),
        (in_day % 1000, 3, b'Z'),
    ];
    for (value, width, after) in fields {
        push_padded(out, value, width);
        out.push(after);
    }
}

/// `value` (>= 0) in decimal, zero-padded to `width` digits.
fn push_padded(out: &mut Vec<u8>, value: i64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut rest = value;
    let mut at = digits.len();
    while rest > 0 {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    out.extend_from_slice(&digits[at.min(digits.len() - width)..]);
}

/// The proleptic Gregorian (year, month, day) of `days` (>= 0) since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let march_month = (5 * day_of_year + 2) / 153; // 0 is March
    let day = day_of_year - (153 * march_month + 2) / 5 + 1;
    let month = if march_month < 10 { march_month + 3 } else { march_month - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
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

/// `txlog consume --output jsonl|json|csv|table`: one row per record.
///
/// cli/consume.py's `_Rows` (through cli/output.py's `RowWriter`) is the reference: a row holds
/// the topic, partition, offset, timestamp (epoch ms, or ISO text: `push_timestamp`), key, value
/// and headers. jsonl is `json.dumps(row, ensure_ascii=False, separators=(", ", ": "))` and a
/// newline; json is one element of the array `json.dumps(rows, indent=2)` prints, each led by
/// `,` (the writer turns the first one's into `[`); csv is the excel dialect of Python's csv
/// module with a `\n` line terminator, where the headers are one field (`json.dumps` of the
/// `[name, value]` pairs, or empty) and a missing key or value is an empty field; a table row
/// is its cells' text, each length-prefixed (`push_table_cell`), for `table_widths` and
/// `table_rows` to lay out once every row is known. Keys and values go through
/// `--value-format`; utf8 shows bytes that are not UTF-8 with U+FFFD
/// (`bytes.decode(errors="replace")`), and `write` says when it did, for the CLI's note.
/// Header values are always UTF-8 text, replaced alike but never noted.
///
/// `KcatJson` is kcat's `-J` envelope instead, one object per line (cli/consume.py `_KcatJson`
/// is its reference): `json.dumps(doc, ensure_ascii=False, separators=(",", ":"))` of topic,
/// partition, offset, tstype and ts (both left out for a record without a timestamp), broker
/// (the id `txlog serve` gives the store's only broker), the headers as one flat array of names
/// and values, key and payload.
/// `Kcat` is kcat's `-f` format (cli/consume.py `_KcatFormatter`, which parses it, is its
/// reference): its literal text and fields in order, no line separator of its own.
#[derive(Clone, Debug)]
pub struct RowFormat {
    pub style: RowStyle,
    pub value_format: ValueFormat,
    /// The topic's name (a row names its topic; a formatter serves one topic).
    pub topic: String,
    /// `--timestamp-format iso` (`push_timestamp`).
    pub iso_timestamps: bool,
}

#[derive(Clone, Debug)]
pub enum RowStyle {
    Jsonl,
    Json,
    /// `quoted`: the characters that make Python's csv writer quote a field (QUOTE_MINIMAL), as
    /// the running Python's csv module reports them (storage/console_format.py).
    Csv {
        quoted: Vec<u8>,
    },
    Table,
    KcatJson {
        broker: i64,
    },
    Kcat {
        parts: Vec<KcatPart>,
    },
}

/// One piece of a kcat `-f` format: text written as is, or a field by its letter (`%t %p %o %k
/// %K %s %S %R %h %T`; `KCAT_FIELDS`).
#[derive(Clone, Debug)]
pub enum KcatPart {
    Literal(Vec<u8>),
    Field(u8),
}

/// The letters of the fields kcat's `-f` knows (`%%` is literal text by the time it gets here).
pub const KCAT_FIELDS: &[u8] = b"tpokKsSRhT";

/// The parts of one record a row shows.
pub struct RowFields<'a> {
    pub timestamp: i128,
    /// The batch's timestamp type is LogAppendTime (kcat's `tstype` names it).
    pub log_append_time: bool,
    pub partition: i64,
    pub offset: i128,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Names as the decoded record holds them (invalid UTF-8 already replaced).
    pub headers: &'a [(&'a [u8], Option<&'a [u8]>)],
}

impl RowFormat {
    /// Append the record's row (with its newline, in the text formats) to `out`; true when a key
    /// or value was not UTF-8 and was shown with U+FFFD.
    pub fn write(&self, out: &mut Vec<u8>, f: &RowFields, scratch: &mut Vec<u8>) -> bool {
        match &self.style {
            RowStyle::Jsonl => self.write_json(out, f, scratch, JsonLayout::LINE),
            RowStyle::Json => self.write_json(out, f, scratch, JsonLayout::ARRAY_ELEMENT),
            RowStyle::Csv { quoted } => self.write_csv(out, f, scratch, quoted),
            RowStyle::Table => self.write_table(out, f),
            RowStyle::KcatJson { broker } => self.write_kcat_json(out, f, scratch, *broker),
            RowStyle::Kcat { parts } => {
                self.write_kcat(out, f, parts);
                false
            }
        }
    }

    /// kcat's `-f` fields: keys and values through `--value-format` (as is by default), their
    /// lengths -1 when null, `%R` the value's length as a big-endian i32, `%T` always epoch ms,
    /// `%h` the headers as `name=value` joined by `,` (the values' bytes as they are, `NULL`).
    fn write_kcat(&self, out: &mut Vec<u8>, f: &RowFields, parts: &[KcatPart]) {
        let length = |data: Option<&[u8]>| data.map_or(-1, |d| d.len() as i64);
        for part in parts {
            match part {
                KcatPart::Literal(text) => out.extend_from_slice(text),
                KcatPart::Field(b't') => out.extend_from_slice(self.topic.as_bytes()),
                KcatPart::Field(b'p') => push_int(out, f.partition as i128),
                KcatPart::Field(b'o') => push_int(out, f.offset),
                KcatPart::Field(b'T') => push_int(out, f.timestamp),
                KcatPart::Field(b'k') => encode_value(out, f.key.unwrap_or_default(), self.value_format),
                KcatPart::Field(b's') => encode_value(out, f.value.unwrap_or_default(), self.value_format),
                KcatPart::Field(b'K') => push_int(out, length(f.key) as i128),
                KcatPart::Field(b'S') => push_int(out, length(f.value) as i128),
                KcatPart::Field(b'R') => out.extend_from_slice(&(length(f.value) as i32).to_be_bytes()),
                KcatPart::Field(b'h') => {
                    for (i, (name, value)) in f.headers.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(name);
                        out.push(b'=');
                        out.extend_from_slice(value.unwrap_or(b"NULL"));
                    }
                }
                KcatPart::Field(_) => {} // refused when the format was made (`KCAT_FIELDS`)
            }
        }
    }

    fn write_kcat_json(&self, out: &mut Vec<u8>, f: &RowFields, scratch: &mut Vec<u8>, broker: i64) -> bool {
        out.extend_from_slice(b"{\"topic\":");
        push_json_str(out, self.topic.as_bytes());
        out.extend_from_slice(b",\"partition\":");
        push_int(out, f.partition as i128);
        out.extend_from_slice(b",\"offset\":");
        push_int(out, f.offset);
        if f.timestamp >= 0 {
            out.extend_from_slice(if f.log_append_time {
                b",\"tstype\":\"logappend\""
            } else {
                b",\"tstype\":\"create\""
            });
            out.extend_from_slice(b",\"ts\":");
            push_timestamp(out, f.timestamp, self.iso_timestamps, true);
        }
        out.extend_from_slice(b",\"broker\":");
        push_int(out, broker as i128);
        out.extend_from_slice(b",\"headers\":[");
        let mut text = Vec::new();
        for (i, (name, value)) in f.headers.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_json_str(out, name);
            out.push(b',');
            push_json_header_value(out, &mut text, *value);
        }
        out.extend_from_slice(b"],\"key\":");
        let mut replaced = self.json_data(out, f.key, scratch);
        out.extend_from_slice(b",\"payload\":");
        replaced |= self.json_data(out, f.value, scratch);
        out.extend_from_slice(b"}\n");
        replaced
    }

    fn write_json(&self, out: &mut Vec<u8>, f: &RowFields, scratch: &mut Vec<u8>, layout: JsonLayout) -> bool {
        let mut replaced = false;
        out.extend_from_slice(layout.open);
        out.extend_from_slice(b"\"topic\": ");
        push_json_str(out, self.topic.as_bytes());
        out.extend_from_slice(layout.item);
        out.extend_from_slice(b"\"partition\": ");
        push_int(out, f.partition as i128);
        out.extend_from_slice(layout.item);
        out.extend_from_slice(b"\"offset\": ");
        push_int(out, f.offset);
        out.extend_from_slice(layout.item);
        out.extend_from_slice(b"\"timestamp\": ");
        push_timestamp(out, f.timestamp, self.iso_timestamps, true);
        out.extend_from_slice(layout.item);
        out.extend_from_slice(b"\"key\": ");
        replaced |= self.json_data(out, f.key, scratch);
        out.extend_from_slice(layout.item);
        out.extend_from_slice(b"\"value\": ");
        replaced |= self.json_data(out, f.value, scratch);
        out.extend_from_slice(layout.item);
        out.extend_from_slice(b"\"headers\": ");
        if layout.indented {
            push_json_headers_indented(out, f.headers);
        } else {
            push_json_headers(out, f.headers);
        }
        out.extend_from_slice(layout.close);
        replaced
    }

    fn write_csv(&self, out: &mut Vec<u8>, f: &RowFields, scratch: &mut Vec<u8>, quoted: &[u8]) -> bool {
        let mut replaced = false;
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
        push_timestamp(scratch, f.timestamp, self.iso_timestamps, false);
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
        replaced
    }

    /// The row's seven cells as `_Rows` makes them for a table: the numbers in decimal, a
    /// missing key or value `null`, the headers `name=value` joined by `,` (a missing value
    /// `NULL`, no headers an empty cell).
    fn write_table(&self, out: &mut Vec<u8>, f: &RowFields) -> bool {
        let mut replaced = false;
        push_table_cell(out, |cell| cell.extend_from_slice(self.topic.as_bytes()));
        push_table_cell(out, |cell| push_int(cell, f.partition as i128));
        push_table_cell(out, |cell| push_int(cell, f.offset));
        push_table_cell(out, |cell| push_timestamp(cell, f.timestamp, self.iso_timestamps, false));
        for data in [f.key, f.value] {
            push_table_cell(out, |cell| match data {
                None => cell.extend_from_slice(b"null"),
                Some(d) => replaced |= self.text(cell, d),
            });
        }
        push_table_cell(out, |cell| {
            for (i, (name, value)) in f.headers.iter().enumerate() {
                if i > 0 {
                    cell.push(b',');
                }
                cell.extend_from_slice(name);
                cell.push(b'=');
                match value {
                    None => cell.extend_from_slice(b"NULL"),
                    Some(v) => {
                        push_lossy(cell, v);
                    }
                }
            }
        });
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

/// Where a JSON row's punctuation goes: jsonl's one line, or an element of the json array as
/// `json.dumps(rows, indent=2)` lays it out (one level in: every line indented by two more).
struct JsonLayout {
    open: &'static [u8],
    item: &'static [u8],
    close: &'static [u8],
    indented: bool,
}

impl JsonLayout {
    const LINE: JsonLayout = JsonLayout { open: b"{", item: b", ", close: b"}\n", indented: false };
    const ARRAY_ELEMENT: JsonLayout =
        JsonLayout { open: b",\n  {\n    ", item: b",\n    ", close: b"\n  }", indented: true };
}

/// One table cell: its length (u32, little-endian), then its UTF-8 text as `fill` writes it.
fn push_table_cell(out: &mut Vec<u8>, fill: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    fill(out);
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// The cells of a row that starts `data`, one slice per column, or None when `data` holds
/// less than a whole row.
fn table_row<'a>(data: &'a [u8], columns: usize, cells: &mut Vec<&'a [u8]>) -> Option<usize> {
    cells.clear();
    let mut at = 0;
    for _ in 0..columns {
        let len = u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?) as usize;
        cells.push(data.get(at + 4..at + 4 + len)?);
        at += 4 + len;
    }
    Some(at)
}

/// A cell as the "simple" table shows it, or None where only tabulate knows: printable ASCII
/// (one column per character, nothing tabulate reads as a colour code, a new line or a row
/// separator) shows with its spaces at either end stripped (tabulate's `str.strip`, which in
/// ASCII strips only spaces once control characters are excluded).
fn simple_cell(cell: &[u8]) -> Option<&[u8]> {
    if !cell.iter().all(|b| (0x20..0x7f).contains(b)) {
        return None;
    }
    let start = cell.iter().position(|&b| b != b' ').unwrap_or(cell.len());
    let end = cell.iter().rposition(|&b| b != b' ').map_or(start, |i| i + 1);
    Some(&cell[start..end])
}

/// Widen `widths` (one per column, in characters) to the simple cells of the whole rows at the
/// start of `data`; returns the bytes of those rows and whether every cell was simple
/// (`simple_cell`).
pub fn table_widths(data: &[u8], widths: &mut [usize]) -> (usize, bool) {
    let mut cells = Vec::with_capacity(widths.len());
    let (mut at, mut simple) = (0, true);
    while let Some(len) = table_row(&data[at..], widths.len(), &mut cells) {
        for (width, cell) in widths.iter_mut().zip(&cells) {
            match simple_cell(cell) {
                Some(shown) => *width = (*width).max(shown.len()),
                None => simple = false,
            }
        }
        at += len;
    }
    (at, simple)
}

/// The lines of the whole rows at the start of `data` as tabulate's "simple" format lays out
/// its rows (every cell simple): cells left-aligned and padded to `widths`, two spaces between
/// columns, the line's trailing spaces stripped, each line ending with a newline. Returns the
/// bytes of the rows read.
pub fn table_rows(out: &mut Vec<u8>, data: &[u8], widths: &[usize]) -> usize {
    let mut cells = Vec::with_capacity(widths.len());
    let mut at = 0;
    while let Some(len) = table_row(&data[at..], widths.len(), &mut cells) {
        let line = out.len();
        for (i, (cell, &width)) in cells.iter().zip(widths).enumerate() {
            if i > 0 {
                out.extend_from_slice(b"  ");
            }
            let shown = simple_cell(cell).unwrap_or(cell);
            out.extend_from_slice(shown);
            out.resize(out.len() + width.saturating_sub(shown.len()), b' ');
        }
        let kept = out[line..].iter().rposition(|&b| b != b' ').map_or(line, |i| line + i + 1);
        out.truncate(kept);
        out.push(b'\n');
        at += len;
    }
    at
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
        push_json_header_value(out, &mut text, *value);
        out.push(b']');
    }
    out.push(b']');
}

/// A header's value as a JSON string of its text (undecodable bytes replaced), or `null`; `text`
/// is scratch space the caller reuses across headers.
fn push_json_header_value(out: &mut Vec<u8>, text: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        None => out.extend_from_slice(b"null"),
        Some(v) => {
            text.clear();
            push_lossy(text, v);
            push_json_str(out, text);
        }
    }
}

/// The headers as `json.dumps(rows, indent=2)` writes them inside an array element (the
/// `headers` key two levels in): `[]`, or each `[name, value]` pair over four lines.
fn push_json_headers_indented(out: &mut Vec<u8>, headers: &[(&[u8], Option<&[u8]>)]) {
    if headers.is_empty() {
        out.extend_from_slice(b"[]");
        return;
    }
    out.push(b'[');
    let mut text = Vec::new();
    for (i, (name, value)) in headers.iter().enumerate() {
        out.extend_from_slice(if i > 0 { b",\n      [\n        " } else { b"\n      [\n        " });
        push_json_str(out, name);
        out.extend_from_slice(b",\n        ");
        push_json_header_value(out, &mut text, *value);
        out.extend_from_slice(b"\n      ]");
    }
    out.extend_from_slice(b"\n    ]");
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
            log_append_time: false,
            partition: 3,
            offset: 9,
            key: None,
            value: Some(b"q\"\\\n\r\t\x08\x0c\x01\x7f,\xc3\xbc\xff"),
            headers: &headers,
        };
        let jsonl = RowFormat {
            style: RowStyle::Jsonl,
            value_format: ValueFormat::Utf8,
            topic: "t".into(),
            iso_timestamps: false,
        };
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
    fn kcat_json_is_kcats_envelope_in_pythons_compact_json() {
        let headers: [(&[u8], Option<&[u8]>); 2] = [(b"a\"", Some(b"1\xff")), (b"b", None)];
        let kcat = RowFormat {
            style: RowStyle::KcatJson { broker: 1 },
            value_format: ValueFormat::Utf8,
            topic: "t".into(),
            iso_timestamps: true,
        };
        let fields = RowFields {
            timestamp: 0,
            log_append_time: true,
            partition: 3,
            offset: 9,
            key: Some(b"k\n"),
            value: None,
            headers: &headers,
        };
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        assert!(!kcat.write(&mut out, &fields, &mut scratch));
        let expected = "{\"topic\":\"t\",\"partition\":3,\"offset\":9,\"tstype\":\"logappend\",\
                        \"ts\":\"1970-01-01T00:00:00.000Z\",\"broker\":1,\"headers\":[\"a\\\"\",\"1\u{fffd}\",\"b\",null],\
                        \"key\":\"k\\n\",\"payload\":null}\n";
        assert_eq!(String::from_utf8(out).unwrap(), expected);
        // No timestamp: no tstype and no ts; a value that is not UTF-8 is replaced and said to be.
        let mut out = Vec::new();
        let untimed = RowFields { timestamp: -1, headers: &[], value: Some(b"\xff"), ..fields };
        assert!(kcat.write(&mut out, &untimed, &mut scratch));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"topic\":\"t\",\"partition\":3,\"offset\":9,\"broker\":1,\"headers\":[],\"key\":\"k\\n\",\"payload\":\"\u{fffd}\"}\n"
        );
    }

    #[test]
    fn kcat_format_writes_its_fields_between_its_text() {
        let headers: [(&[u8], Option<&[u8]>); 2] = [(b"a", Some(b"1\xff")), (b"b", None)];
        let parts = b"tpoTkKsSRh"
            .iter()
            .flat_map(|&letter| [KcatPart::Field(letter), KcatPart::Literal(b"|".to_vec())])
            .collect();
        let kcat = RowFormat {
            style: RowStyle::Kcat { parts },
            value_format: ValueFormat::Hex,
            topic: "t".into(),
            iso_timestamps: true,
        };
        let fields = RowFields {
            timestamp: 5,
            log_append_time: false,
            partition: 3,
            offset: 9,
            key: None,
            value: Some(b"\x01\xff"),
            headers: &headers,
        };
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        assert!(!kcat.write(&mut out, &fields, &mut scratch));
        assert_eq!(out, b"t|3|9|5||-1|01ff|2|\x00\x00\x00\x02|a=1\xff,b=NULL|");
    }

    #[test]
    fn iso_timestamps_are_exact_and_stay_ms_outside_iso_texts_range() {
        let cases: [(i128, &str); 8] = [
            (0, "1970-01-01T00:00:00.000Z"),
            (999, "1970-01-01T00:00:00.999Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_700_000_000_123, "2023-11-14T22:13:20.123Z"),
            (4_107_542_399_999, "2100-02-28T23:59:59.999Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            (253_402_300_800_000, "253402300800000"),
            (-1, "-1"),
        ];
        for (ms, text) in cases {
            let mut out = Vec::new();
            push_timestamp(&mut out, ms, true, false);
            assert_eq!(String::from_utf8(out).unwrap(), text);
        }
        let mut out = Vec::new();
        push_timestamp(&mut out, 5, true, true);
        push_timestamp(&mut out, -5, true, true);
        push_timestamp(&mut out, 5, false, true);
        assert_eq!(out, b"\"1970-01-01T00:00:00.005Z\"-55");
    }

    #[test]
    fn every_day_of_four_centuries_follows_the_one_before() {
        let (mut year, mut month, mut day) = (1970, 1, 1);
        for days in 0..146_097 * 2 {
            assert_eq!(civil_from_days(days), (year, month, day), "day {days}");
            let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
            let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
            day += 1;
            if day > month_days[month as usize - 1] {
                (day, month) = (1, month + 1);
                if month > 12 {
                    (month, year) = (1, year + 1);
                }
            }
        }
    }

    #[test]
    fn a_json_element_is_indented_one_level_in() {
        let headers: [(&[u8], Option<&[u8]>); 2] = [(b"h", None), (b"a", Some(b"b"))];
        let fields = RowFields {
            timestamp: 7,
            log_append_time: false,
            partition: 0,
            offset: 1,
            key: None,
            value: Some(b"v"),
            headers: &headers,
        };
        let json = RowFormat {
            style: RowStyle::Json,
            value_format: ValueFormat::Utf8,
            topic: "t".into(),
            iso_timestamps: false,
        };
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        json.write(&mut out, &fields, &mut scratch);
        json.write(&mut out, &RowFields { headers: &[], ..fields }, &mut scratch);
        let element =
            ",\n  {\n    \"topic\": \"t\",\n    \"partition\": 0,\n    \"offset\": 1,\n    \"timestamp\": 7,\n    \
                       \"key\": null,\n    \"value\": \"v\",\n    \"headers\": ";
        let expected = format!(
            "{element}[\n      [\n        \"h\",\n        null\n      ],\n      [\n        \"a\",\n        \"b\"\n      ]\n    ]\n  }}\
             {element}[]\n  }}"
        );
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn table_rows_are_padded_stripped_and_measured() {
        let table = RowFormat {
            style: RowStyle::Table,
            value_format: ValueFormat::Hex,
            topic: "t".into(),
            iso_timestamps: true,
        };
        let headers: [(&[u8], Option<&[u8]>); 2] = [(b"a", Some(b" 1")), (b"b", None)];
        let fields = RowFields {
            timestamp: -1,
            log_append_time: false,
            partition: 2,
            offset: 30,
            key: None,
            value: Some(b"\x01"),
            headers: &headers,
        };
        let (mut data, mut scratch) = (Vec::new(), Vec::new());
        table.write(&mut data, &fields, &mut scratch);
        let first = data.len();
        table.write(&mut data, &RowFields { headers: &[], value: None, timestamp: 0, ..fields }, &mut scratch);
        let mut widths = vec![1; 7];
        assert_eq!(table_widths(&data[..data.len() - 1], &mut widths), (first, true)); // one whole row
        widths = vec![1; 7];
        assert_eq!(table_widths(&data, &mut widths), (data.len(), true));
        assert_eq!(widths, [1, 1, 2, 24, 4, 4, 11]);
        let mut out = Vec::new();
        assert_eq!(table_rows(&mut out, &data, &widths), data.len());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "t  2  30  -1                        null  01    a= 1,b=NULL\n\
             t  2  30  1970-01-01T00:00:00.000Z  null  null\n"
        );
        let mut odd = Vec::new();
        push_table_cell(&mut odd, |cell| cell.extend_from_slice("\u{fc}".as_bytes()));
        assert_eq!(table_widths(&odd, &mut [0]), (odd.len(), false));
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
            iso_timestamps: false,
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
