//! The golden corpus (tests/golden/, README there) against the pure core: every valid batch's
//! header, CRC and records must be what the manifest says, and every damaged one must fail at
//! the manifest's stage. tests/native/test_golden_batches.py holds the Python codecs and
//! tests/spark/test_jvm_golden.py the JVM reader to the same files, so a format change fails in
//! all three at once.
//!
//! The stage is found by what the core does, never by an error message: `frame` when the
//! header is refused with the CRC check off, `crc` when only the check refuses it, `decompress`
//! when the records region does not inflate, `records` when the inflated records do not decode.
//! The manifest is read by the small JSON reader below (std has none, and the crate takes no
//! dependency for a test).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::codec::{self, CodecError, Header};
use crate::compression;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("..").join("tests").join("golden")
}

// --- the manifest ---------------------------------------------------------------------------------

/// A JSON value: as much of JSON as the manifest uses (its numbers are all integers).
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Str(String),
    List(Vec<Json>),
    Object(BTreeMap<String, Json>),
}

impl Json {
    fn get(&self, key: &str) -> &Json {
        match self {
            Json::Object(map) => map.get(key).unwrap_or_else(|| panic!("manifest: no {key:?} in {self:?}")),
            _ => panic!("manifest: {key:?} looked up in a non-object"),
        }
    }

    fn has(&self, key: &str) -> bool {
        matches!(self, Json::Object(map) if map.contains_key(key))
    }

    fn int(&self) -> i64 {
        match self {
            Json::Int(v) => *v,
            _ => panic!("manifest: {self:?} is not an integer"),
        }
    }

    fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            _ => panic!("manifest: {self:?} is not a string"),
        }
    }

    fn boolean(&self) -> bool {
        match self {
            Json::Bool(b) => *b,
            _ => panic!("manifest: {self:?} is not a boolean"),
        }
    }

    fn list(&self) -> &[Json] {
        match self {
            Json::List(items) => items,
            _ => panic!("manifest: {self:?} is not a list"),
        }
    }

    /// A hex string as bytes, or None for null (keys, values and header values).
    fn bytes(&self) -> Option<Vec<u8>> {
        match self {
            Json::Null => None,
            Json::Str(hex) => Some(
                (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("manifest: bad hex"))
                    .collect(),
            ),
            _ => panic!("manifest: {self:?} is neither hex nor null"),
        }
    }
}

/// A recursive-descent reader of one JSON document.
struct JsonReader<'a> {
    text: &'a [u8],
    pos: usize,
}

impl<'a> JsonReader<'a> {
    fn parse(text: &'a str) -> Result<Json, String> {
        let mut reader = JsonReader { text: text.as_bytes(), pos: 0 };
        let value = reader.value()?;
        reader.space();
        if reader.pos != reader.text.len() {
            return Err(format!("text after the document at byte {}", reader.pos));
        }
        Ok(value)
    }

    fn space(&mut self) {
        while self.pos < self.text.len() && self.text[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Result<u8, String> {
        self.space();
        self.text.get(self.pos).copied().ok_or_else(|| "the document ends early".to_string())
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        if self.peek()? != byte {
            return Err(format!("expected {:?} at byte {}", byte as char, self.pos));
        }
        self.pos += 1;
        Ok(())
    }

    fn word(&mut self, word: &str, value: Json) -> Result<Json, String> {
        if !self.text[self.pos..].starts_with(word.as_bytes()) {
            return Err(format!("unexpected text at byte {}", self.pos));
        }
        self.pos += word.len();
        Ok(value)
    }

    fn value(&mut self) -> Result<Json, String> {
        match self.peek()? {
            b'{' => self.object(),
            b'[' => self.list(),
            b'"' => Ok(Json::Str(self.string()?)),
            b't' => self.word("true", Json::Bool(true)),
            b'f' => self.word("false", Json::Bool(false)),
            b'n' => self.word("null", Json::Null),
            _ => self.integer(),
        }
    }

    fn object(&mut self) -> Result<Json, String> {
        self.expect(b'{')?;
        let mut map = BTreeMap::new();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Ok(Json::Object(map));
        }
        loop {
            self.space();
            let key = self.string()?;
            self.expect(b':')?;
            map.insert(key, self.value()?);
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Ok(Json::Object(map));
                }
                _ => return Err(format!("expected ',' or '}}' at byte {}", self.pos)),
            }
        }
    }

    fn list(&mut self) -> Result<Json, String> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        if self.peek()? == b']' {
            self.pos += 1;
            return Ok(Json::List(items));
        }
        loop {
            items.push(self.value()?);
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Ok(Json::List(items));
                }
                _ => return Err(format!("expected ',' or ']' at byte {}", self.pos)),
            }
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut units: Vec<u16> = Vec::new(); // UTF-16, so \u surrogate pairs join up
        let mut out = String::new();
        loop {
            let byte = *self.text.get(self.pos).ok_or("a string runs to the end")?;
            if byte != b'\\' && !units.is_empty() {
                out.push_str(&String::from_utf16(&units).map_err(|e| e.to_string())?);
                units.clear();
            }
            match byte {
                b'"' => {
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    let escape = *self.text.get(self.pos + 1).ok_or("a string runs to the end")?;
                    self.pos += 2;
                    let simple = match escape {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hex = std::str::from_utf8(self.text.get(self.pos..self.pos + 4).ok_or("short \\u")?)
                                .map_err(|e| e.to_string())?;
                            units.push(u16::from_str_radix(hex, 16).map_err(|e| e.to_string())?);
                            self.pos += 4;
                            continue;
                        }
                        other => return Err(format!("unknown escape \\{}", other as char)),
                    };
                    if !units.is_empty() {
                        out.push_str(&String::from_utf16(&units).map_err(|e| e.to_string())?);
                        units.clear();
                    }
                    out.push(simple);
                }
                _ => {
                    let start = self.pos;
                    while self.pos < self.text.len() && !matches!(self.text[self.pos], b'"' | b'\\') {
                        self.pos += 1;
                    }
                    out.push_str(std::str::from_utf8(&self.text[start..self.pos]).map_err(|e| e.to_string())?);
                }
            }
        }
    }

    fn integer(&mut self) -> Result<Json, String> {
        let start = self.pos;
        if self.text.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        while self.pos < self.text.len() && self.text[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        let text = std::str::from_utf8(&self.text[start..self.pos]).map_err(|e| e.to_string())?;
        text.parse::<i64>().map(Json::Int).map_err(|_| format!("not an integer at byte {start}: {text:?}"))
    }
}

fn manifest() -> Json {
    let path = golden_dir().join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    JsonReader::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn batch_file(manifest: &Json, entry: &Json) -> Vec<u8> {
    let path = golden_dir().join(manifest.get("batches_dir").str()).join(entry.get("file").str());
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// --- valid batches ------------------------------------------------------------------------------------

/// A decoded record as the manifest states one: offset, timestamp, key, value, headers, sequence.
type Row = (i64, i64, Option<Vec<u8>>, Option<Vec<u8>>, Vec<(Vec<u8>, Option<Vec<u8>>)>, i64);

fn expected_rows(entry: &Json) -> Vec<Row> {
    entry
        .get("records")
        .list()
        .iter()
        .map(|r| {
            (
                r.get("offset").int(),
                r.get("timestamp").int(),
                r.get("key").bytes(),
                r.get("value").bytes(),
                r.get("headers")
                    .list()
                    .iter()
                    .map(|h| (h.get("key").bytes().expect("a header key is never null"), h.get("value").bytes()))
                    .collect(),
                r.get("sequence").int(),
            )
        })
        .collect()
}

fn header_fields(h: &Header) -> Vec<(&'static str, i64)> {
    vec![
        ("base_offset", h.base_offset),
        ("batch_length", h.batch_length as i64),
        ("partition_leader_epoch", h.partition_leader_epoch as i64),
        ("magic", h.magic as i64),
        ("crc", h.crc as i64),
        ("attributes", h.attributes as i64),
        ("last_offset_delta", h.last_offset_delta as i64),
        ("base_timestamp", h.base_timestamp),
        ("max_timestamp", h.max_timestamp),
        ("producer_id", h.producer_id),
        ("producer_epoch", h.producer_epoch as i64),
        ("base_sequence", h.base_sequence as i64),
        ("records_count", h.records_count as i64),
    ]
}

/// Header, flags and records of one valid file; the first difference found, if any.
fn check_valid(data: &[u8], entry: &Json) -> Result<(), String> {
    let h = codec::parse_header(data, 0, true).map_err(|e| format!("header refused: {e}"))?;
    let size = h.batch_length as usize + codec::LOG_OVERHEAD;
    if size != data.len() || size as i64 != entry.get("size").int() {
        return Err(format!(
            "batch of {size} bytes in a file of {}, manifest says {}",
            data.len(),
            entry.get("size").int()
        ));
    }
    for (name, got) in header_fields(&h) {
        let want = entry.get("header").get(name).int();
        if got != want {
            return Err(format!("header {name} is {got}, manifest says {want}"));
        }
    }
    let codec_id = (h.attributes & 0x07) as u8;
    let log_append = h.attributes & 0x08 != 0;
    let flags = (
        compression::name(codec_id),
        if log_append { "LogAppendTime" } else { "CreateTime" },
        h.attributes & 0x10 != 0,
        h.attributes & 0x20 != 0,
    );
    let want = (
        entry.get("compression").str(),
        entry.get("timestamp_type").str(),
        entry.get("transactional").boolean(),
        entry.get("control").boolean(),
    );
    if flags != want {
        return Err(format!("attributes say {flags:?}, manifest says {want:?}"));
    }
    let inflated = compression::decompress(codec_id, &data[codec::HEADER_SIZE..size])
        .map_err(|e| format!("records region does not inflate: {e}"))?;
    let mut rows: Vec<Row> = Vec::new();
    codec::for_each_record(&inflated, h.records_count, |r| {
        // docs/kafka-formats.md §1.2: under LOG_APPEND_TIME every record has the batch's maxTimestamp
        let timestamp = if log_append { h.max_timestamp } else { h.base_timestamp + r.timestamp_delta };
        rows.push((
            h.base_offset + r.offset_delta as i64,
            timestamp,
            r.key.map(<[u8]>::to_vec),
            r.value.map(<[u8]>::to_vec),
            r.headers.iter().map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec))).collect(),
            codec::sequence_of(h.base_sequence, r.offset_delta),
        ));
        Ok(())
    })
    .map_err(|e| format!("records do not decode: {e}"))?;
    let want = expected_rows(entry);
    if rows.len() != want.len() {
        return Err(format!("{} records, manifest says {}", rows.len(), want.len()));
    }
    for (i, (got, want)) in rows.iter().zip(&want).enumerate() {
        if got != want {
            return Err(format!("record {i} is {got:?}, manifest says {want:?}"));
        }
    }
    Ok(())
}

#[test]
fn golden_valid_batches_decode_as_the_manifest_says() {
    let manifest = manifest();
    let valid: Vec<&Json> = manifest.get("batches").list().iter().filter(|b| !b.has("error")).collect();
    assert!(valid.len() >= 10, "the corpus has its valid batches");
    let failures: Vec<String> = valid
        .iter()
        .filter_map(|entry| {
            check_valid(&batch_file(&manifest, entry), entry)
                .err()
                .map(|why| format!("{}: {why}", entry.get("file").str()))
        })
        .collect();
    assert!(failures.is_empty(), "golden batches decoded otherwise than the manifest says:\n{}", failures.join("\n"));
}

// --- damaged batches ------------------------------------------------------------------------------------

/// The stage at which the core refuses `data`, with its error; None when it reads the batch.
fn failure(data: &[u8]) -> Option<(&'static str, CodecError)> {
    if let Err(e) = codec::parse_header(data, 0, false) {
        return Some(("frame", e));
    }
    let h = match codec::parse_header(data, 0, true) {
        Ok(h) => h,
        Err(e) => return Some(("crc", e)),
    };
    let size = h.batch_length as usize + codec::LOG_OVERHEAD;
    let inflated = match compression::decompress((h.attributes & 0x07) as u8, &data[codec::HEADER_SIZE..size]) {
        Ok(inflated) => inflated,
        Err(e) => return Some(("decompress", e)),
    };
    codec::for_each_record(&inflated, h.records_count, |_| Ok(())).err().map(|e| ("records", e))
}

/// Whether the error is one the stage produces: the header's checks are `Corrupt`, a codec's
/// failure `Decompress` (an unknown codec `Value`), a decode `Corrupt` or `Truncated`.
fn fits(stage: &str, error: &CodecError) -> bool {
    match stage {
        "frame" | "crc" => matches!(error, CodecError::Corrupt { .. }),
        "decompress" => matches!(error, CodecError::Decompress(_) | CodecError::TooLarge(_) | CodecError::Value(_)),
        _ => matches!(error, CodecError::Corrupt { .. } | CodecError::Truncated),
    }
}

#[test]
fn golden_damaged_batches_fail_at_their_stage() {
    let manifest = manifest();
    let damaged: Vec<&Json> = manifest.get("batches").list().iter().filter(|b| b.has("error")).collect();
    assert!(damaged.len() >= 10, "the corpus has its damaged batches");
    let mut failures = Vec::new();
    for entry in damaged {
        let want = entry.get("error").get("kind").str();
        let name = entry.get("file").str();
        match failure(&batch_file(&manifest, entry)) {
            None => failures.push(format!("{name}: read without error, manifest says it fails at {want}")),
            Some((stage, error)) if stage != want || !fits(stage, &error) => {
                failures.push(format!("{name}: fails at {stage} ({error:?}), manifest says {want}"))
            }
            Some(_) => {}
        }
    }
    assert!(failures.is_empty(), "damaged golden batches:\n{}", failures.join("\n"));
}

#[test]
fn the_json_reader_reads_what_the_manifest_may_hold() {
    let doc =
        JsonReader::parse(r#" {"a": [1, -2, true, false, null], "b": "x\"\u00e9\ud83d\ude00\n", "c": {}} "#).unwrap();
    assert_eq!(doc.get("a").list(), &[Json::Int(1), Json::Int(-2), Json::Bool(true), Json::Bool(false), Json::Null]);
    assert_eq!(doc.get("b").str(), "x\"\u{e9}\u{1f600}\n");
    assert_eq!(doc.get("c"), &Json::Object(BTreeMap::new()));
    assert!(JsonReader::parse("[1, 2").is_err());
    assert!(JsonReader::parse("[1.5]").is_err());
    assert!(JsonReader::parse("{} x").is_err());
}
