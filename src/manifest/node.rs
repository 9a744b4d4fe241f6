//! A document tree that remembers where every value was written.
//!
//! TOML and YAML are both read into [`Node`]s first; the typed model is then
//! deserialized from the tree (see `de.rs`), so that every error, from a
//! misspelt key to a conflicting destination found much later, can name the
//! line and column it comes from, the same way for both formats.

use std::fmt;

/// A 1-based line and column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pos {
    pub line: u32,
    pub column: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

/// Takes a table of a rule, with the name of its list, as soon as the
/// parser has read it (see `toml_doc::by_tables` and
/// `yaml_doc::parse_with`): None when kept, or the table given back.
pub type Take<'t> = &'t mut dyn FnMut(&str, Node) -> Option<Node>;

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub pos: Pos,
    pub value: Value,
}

impl Node {
    pub fn describe(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a table",
        }
    }
}

/// A syntax error, with its position when the parser gave one.
#[derive(Debug)]
pub struct SyntaxError {
    pub pos: Option<Pos>,
    pub message: String,
}

/// Byte offset to line and column (columns count characters), for one
/// offset; [`Lines`] answers many.
pub fn pos_of(text: &str, offset: usize) -> Pos {
    Lines::new(text).pos(offset)
}

/// Where lines of a text start, so that turning an offset into a line and
/// column costs a binary search and a few lines' length, not a scan from
/// the top (which made loading a manifest quadratic). Only every
/// [`LINES_PER_MARK`]th line start is kept (a few bytes per hundred lines
/// of manifest), and the last answer: offsets asked for in increasing order,
/// as a parser asks, count each character once.
pub struct Lines<'t> {
    text: &'t str,
    /// Where lines 0, LINES_PER_MARK, 2 * LINES_PER_MARK, ... start.
    marks: Vec<u32>,
    /// The last offset asked for and its position.
    last: std::cell::Cell<(usize, Pos)>,
}

/// Every this many lines, a line start is kept.
const LINES_PER_MARK: usize = 16;

impl<'t> Lines<'t> {
    pub fn new(text: &'t str) -> Self {
        // Manifests are at most 64 MiB (crate::io::MAX_INPUT): offsets fit.
        debug_assert!(u32::try_from(text.len()).is_ok());
        let mut marks = vec![0];
        let mut line = 0;
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                line += 1;
                if line % LINES_PER_MARK == 0 {
                    marks.push((i + 1) as u32);
                }
            }
        }
        Lines {
            text,
            marks,
            last: std::cell::Cell::new((0, Pos { line: 1, column: 1 })),
        }
    }

    pub fn pos(&self, offset: usize) -> Pos {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        // From the last mark at or before the offset, or from the last
        // answer when that is nearer.
        let m = self.marks.partition_point(|&s| s as usize <= offset) - 1;
        let mut from = (
            self.marks[m] as usize,
            Pos {
                line: (m * LINES_PER_MARK) as u32 + 1,
                column: 1,
            },
        );
        let (last_offset, last_pos) = self.last.get();
        if from.0 <= last_offset && last_offset <= offset {
            from = (last_offset, last_pos);
        }
        let (start, at) = from;
        let piece = &self.text[start..offset];
        let pos = match piece.rfind('\n') {
            None => Pos {
                line: at.line,
                column: at.column + piece.chars().count() as u32,
            },
            Some(nl) => Pos {
                line: at.line + piece.bytes().filter(|&b| b == b'\n').count() as u32,
                column: piece[nl + 1..].chars().count() as u32 + 1,
            },
        };
        self.last.set((offset, pos));
        pos
    }
}

pub mod toml_doc {
    use super::*;
    use toml::de::{DeTable, DeValue};
    use toml_parser::lexer::TokenKind;

    /// Parses a TOML document. A manifest of many `[[file]]`, `[[dir]]`, ...
    /// tables is parsed table by table (see [`by_tables`]), so that the toml
    /// crate's document (about 1 KB per table) is never held whole; any
    /// other document, and any document with an error, is parsed whole, and
    /// both give the same tree.
    pub fn parse(text: &str) -> Result<Node, SyntaxError> {
        let lines = Lines::new(text);
        if let Some(node) = by_tables(text, &lines, &mut |_, table| Some(table)) {
            return Ok(node);
        }
        whole(text, &lines)
    }

    /// The whole document at once.
    pub fn whole(text: &str, lines: &Lines) -> Result<Node, SyntaxError> {
        let table = DeTable::parse(text).map_err(|e| SyntaxError {
            pos: e.span().map(|s| lines.pos(s.start)),
            message: e.message().trim_end().to_string(),
        })?;
        let span = table.span();
        let at = Locate {
            lines,
            pieces: &[(0, 0)],
        };
        Ok(convert_table(&at, table.into_inner(), span.start))
    }

    /// Offsets of a parsed text to positions in the manifest: `pieces` are
    /// (offset in the parsed text, offset in the manifest) where each
    /// copied piece starts.
    struct Locate<'a, 't> {
        lines: &'a Lines<'t>,
        pieces: &'a [(usize, usize)],
    }

    impl Locate<'_, '_> {
        fn pos(&self, offset: usize) -> Pos {
            let i = self.pieces.partition_point(|&(at, _)| at <= offset).max(1) - 1;
            let (at, orig) = self.pieces[i];
            self.lines.pos(orig + (offset - at))
        }
    }

    /// A table header: where its `[` is, whether it is `[[...]]`, its first
    /// key when that is a bare key, and whether it has more keys.
    struct Header<'t> {
        start: usize,
        array: bool,
        first: Option<&'t str>,
        dotted: bool,
    }

    /// The headers of a document, from its tokens: a `[` that starts a line
    /// outside a value, in order. An item is None for anything unusual (a
    /// quoted first key, a header the lexer cannot make sense of): the
    /// caller then parses whole. Headers are read as they are needed, so
    /// that a document of many tables never has them all in memory.
    struct Headers<'t> {
        text: &'t str,
        tokens: toml_parser::lexer::Lexer<'t>,
        line_start: bool,
        in_value: bool,
        depth: usize,
        done: bool,
    }

    impl<'t> Headers<'t> {
        fn new(text: &'t str) -> Self {
            Headers {
                text,
                tokens: toml_parser::Source::new(text).lex(),
                line_start: true,
                in_value: false,
                depth: 0,
                done: false,
            }
        }

        /// The next token that is not whitespace or a comment.
        fn token(&mut self) -> Option<toml_parser::lexer::Token> {
            self.tokens
                .find(|t| !matches!(t.kind(), TokenKind::Whitespace | TokenKind::Comment))
        }

        /// The header that starts with the `[` at `start`.
        fn header(&mut self, start: usize) -> Option<Header<'t>> {
            let text = self.text;
            let mut array = false;
            let mut key = self.token()?;
            if key.kind() == TokenKind::LeftSquareBracket && key.span().start() == start + 1 {
                array = true;
                key = self.token()?;
            }
            let first = match key.kind() {
                TokenKind::Atom => Some(&text[key.span().start()..key.span().end()]),
                _ => return None,
            };
            let mut dotted = false;
            loop {
                let n = self.token()?;
                match n.kind() {
                    TokenKind::RightSquareBracket => break,
                    TokenKind::Dot | TokenKind::Atom => dotted = true,
                    TokenKind::BasicString | TokenKind::LiteralString => dotted = true,
                    _ => return None,
                }
            }
            if array {
                let n = self.token()?;
                if n.kind() != TokenKind::RightSquareBracket {
                    return None;
                }
            }
            Some(Header {
                start,
                array,
                first,
                dotted,
            })
        }
    }

    impl<'t> Iterator for Headers<'t> {
        type Item = Option<Header<'t>>;

        fn next(&mut self) -> Option<Option<Header<'t>>> {
            if self.done {
                return None;
            }
            while let Some(t) = self.token() {
                match t.kind() {
                    TokenKind::Eof => break,
                    TokenKind::Newline => {
                        if self.depth == 0 {
                            self.in_value = false;
                            self.line_start = true;
                        }
                        continue;
                    }
                    TokenKind::LeftSquareBracket if self.line_start && !self.in_value => {
                        self.line_start = false;
                        let h = self.header(t.span().start());
                        self.done = h.is_none();
                        return Some(h);
                    }
                    TokenKind::Equals if self.depth == 0 => self.in_value = true,
                    TokenKind::LeftSquareBracket | TokenKind::LeftCurlyBracket if self.in_value => {
                        self.depth += 1
                    }
                    TokenKind::RightSquareBracket | TokenKind::RightCurlyBracket
                        if self.in_value =>
                    {
                        let Some(d) = self.depth.checked_sub(1) else {
                            self.done = true;
                            return Some(None);
                        };
                        self.depth = d;
                    }
                    _ => {}
                }
                self.line_start = false;
            }
            self.done = true;
            None
        }
    }

    /// Per name of `names`: the positions of its key and its list (from
    /// its first table), and its tables.
    type Arrays = Vec<(Pos, Pos, Vec<Node>)>;

    /// Gives the pending tables to `take`, keeping what it gives back.
    fn give(pending: &mut Vec<(usize, Node)>, names: &[&str], arrays: &mut Arrays, take: Take<'_>) {
        for (k, table) in pending.drain(..) {
            if let Some(table) = take(names[k], table) {
                arrays[k].2.push(table);
            }
        }
    }

    /// Tables parsed before they are given to `take`. One at a time, the
    /// small allocations of the rules `take` makes land among the parser's
    /// short-lived ones and the heap fragments: 50,000 tables then took
    /// 28 MB of RSS, 23 MB in batches of 1,024 (a batch holds about 300 KB
    /// of trees).
    const TAKE_BATCH: usize = 1024;

    /// The document as separate parses: each `[[name]]` table (a top-level
    /// array of tables named by a bare key, with no `[name.sub]` or other
    /// header under that name, and no `name` in the rest) on its own, and
    /// the rest of the document together. None when that is not possible
    /// or a piece fails: the whole document is then parsed, which gives
    /// the error the toml crate gives.
    ///
    /// Each table parsed on its own is given to `take` with its array's
    /// name soon after it is read (in batches of [`TAKE_BATCH`]); `take`
    /// keeps it (None: the caller deserializes it, and the tree is never
    /// held whole) or gives it back to be in the returned tree.
    pub fn by_tables(text: &str, lines: &Lines, take: Take<'_>) -> Option<Node> {
        let simple = |h: &Header| h.array && !h.dotted;
        // Names whose every header is a plain `[[name]]` (sets: a hostile
        // manifest may have a hundred thousand names). A first pass over
        // the headers; the second, below, takes the tables.
        let mut other: std::collections::HashSet<&str> = std::collections::HashSet::new();
        let mut plain: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for h in Headers::new(text) {
            let h = h?;
            if let Some(first) = h.first {
                if simple(&h) {
                    plain.insert(first);
                } else {
                    other.insert(first);
                }
            }
        }
        let mut names: Vec<&str> = plain.into_iter().filter(|n| !other.contains(n)).collect();
        drop(other);
        names.sort_unstable();
        if names.is_empty() {
            return None;
        }
        let detached = |h: &Header| -> Option<usize> {
            if !simple(h) {
                return None;
            }
            names.binary_search(&h.first?).ok()
        };
        // The rest of the text, and where its pieces came from.
        let mut rest = String::new();
        let mut pieces = Vec::new();
        let mut arrays: Arrays = names
            .iter()
            .map(|_| (Pos::default(), Pos::default(), Vec::new()))
            .collect();
        let mut headers = Headers::new(text).peekable();
        // Where the next header starts (the end of the text after the
        // last); None: a header the first pass read is unusual now.
        let next_start = |headers: &mut std::iter::Peekable<Headers>| match headers.peek() {
            None => Some(text.len()),
            Some(h) => h.as_ref().map(|h| h.start),
        };
        let first = next_start(&mut headers)?;
        let mut pending: Vec<(usize, Node)> = Vec::with_capacity(TAKE_BATCH);
        pieces.push((0, 0));
        rest.push_str(&text[..first]);
        while let Some(h) = headers.next() {
            let h = h?;
            let end = next_start(&mut headers)?;
            let piece = &text[h.start..end];
            let Some(k) = detached(&h) else {
                pieces.push((rest.len(), h.start));
                rest.push_str(piece);
                continue;
            };
            let table = DeTable::parse(piece).ok()?;
            let at = Locate {
                lines,
                pieces: &[(0, h.start)],
            };
            let span = table.span();
            let node = convert_table(&at, table.into_inner(), span.start);
            let Value::Map(mut entries) = node.value else {
                return None;
            };
            let (key, value) = entries.pop()?;
            let Value::Seq(mut items) = value.value else {
                return None;
            };
            if !entries.is_empty() || items.len() != 1 || key.value != Value::Str(names[k].into()) {
                return None;
            }
            let array = &mut arrays[k];
            if array.0 == Pos::default() {
                (array.0, array.1) = (key.pos, value.pos);
            }
            pending.push((k, items.pop()?));
            if pending.len() == TAKE_BATCH {
                give(&mut pending, &names, &mut arrays, take);
            }
        }
        give(&mut pending, &names, &mut arrays, take);
        let table = DeTable::parse(&rest).ok()?;
        let at = Locate {
            lines,
            pieces: &pieces,
        };
        let span = table.span();
        let mut root = convert_table(&at, table.into_inner(), span.start);
        let Value::Map(entries) = &mut root.value else {
            return None;
        };
        let known: std::collections::HashSet<&str> = entries
            .iter()
            .filter_map(|(k, _)| match &k.value {
                Value::Str(s) => Some(s.as_str()),
                _ => None,
            })
            .collect();
        if names.iter().any(|n| known.contains(n)) {
            return None;
        }
        for (name, (key_at, list_at, mut items)) in names.iter().zip(arrays) {
            if items.is_empty() {
                continue; // every table taken
            }
            items.shrink_to_fit();
            entries.push((
                Node {
                    pos: key_at,
                    value: Value::Str(name.to_string()),
                },
                Node {
                    pos: list_at,
                    value: Value::Seq(items),
                },
            ));
        }
        // In the order the toml crate keeps the keys of a table.
        entries.sort_by(|a, b| match (&a.0.value, &b.0.value) {
            (Value::Str(x), Value::Str(y)) => x.cmp(y),
            _ => std::cmp::Ordering::Equal,
        });
        Some(root)
    }

    fn convert_table(at: &Locate, table: DeTable<'_>, start: usize) -> Node {
        let mut entries = Vec::with_capacity(table.len());
        for (k, v) in table {
            let key = Node {
                pos: at.pos(k.span().start),
                value: Value::Str(k.into_inner().into_owned()),
            };
            entries.push((key, convert(at, v)));
        }
        Node {
            pos: at.pos(start),
            value: Value::Map(entries),
        }
    }

    fn convert(at: &Locate, v: toml::Spanned<DeValue<'_>>) -> Node {
        let span = v.span();
        let pos = at.pos(span.start);
        let value = match v.into_inner() {
            DeValue::String(s) => Value::Str(s.into_owned()),
            DeValue::Integer(i) => {
                let digits = i.as_str().replace('_', "");
                let (neg, digits) = match digits.strip_prefix('-') {
                    Some(d) => (true, d.to_string()),
                    None => (false, digits.trim_start_matches('+').to_string()),
                };
                let body = match digits.get(..2) {
                    Some("0x" | "0o" | "0b") => digits[2..].to_string(),
                    _ => digits,
                };
                match i64::from_str_radix(&body, i.radix()) {
                    Ok(n) => Value::Int(if neg { -n } else { n }),
                    Err(_) => Value::Str(i.as_str().to_string()),
                }
            }
            DeValue::Float(f) => {
                Value::Float(f.as_str().replace('_', "").parse().unwrap_or(f64::NAN))
            }
            DeValue::Boolean(b) => Value::Bool(b),
            DeValue::Datetime(d) => Value::Str(d.to_string()),
            DeValue::Array(items) => {
                Value::Seq(items.into_iter().map(|i| convert(at, i)).collect())
            }
            DeValue::Table(t) => return convert_table(at, t, span.start),
        };
        Node { pos, value }
    }
}

pub mod yaml_doc {
    use super::*;
    use std::collections::HashMap;
    use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
    use yaml_rust2::scanner::{Marker, TScalarStyle};

    /// How deep collections may nest: TOML's parser allows 80 levels, so
    /// YAML gets the same ("recursion limit", as toml says).
    pub const MAX_DEPTH: usize = 80;
    /// Values that aliases may add beyond those written: the larger of
    /// this and the number of values in the document, so that an alias
    /// bomb (each anchor listing the previous one nine times) fails fast.
    pub const MIN_ALIAS_BUDGET: usize = 10_000;

    #[derive(Default)]
    struct Builder<'t> {
        /// Open collections: the collection, a mapping's key waiting for
        /// its value, and whether the collection has an anchor.
        stack: Vec<(Node, Option<Node>, bool)>,
        take: Option<Take<'t>>,
        anchors: HashMap<usize, Node>,
        root: Option<Node>,
        documents: usize,
        error: Option<SyntaxError>,
        /// Values read from the text, and values aliases repeated.
        written: usize,
        repeated: usize,
    }

    /// How many values `n` holds, itself included.
    fn size(n: &Node) -> usize {
        1 + match &n.value {
            Value::Seq(items) => items.iter().map(size).sum(),
            Value::Map(entries) => entries.iter().map(|(k, v)| size(k) + size(v)).sum(),
            _ => 0,
        }
    }

    fn pos(m: &Marker) -> Pos {
        Pos {
            line: m.line() as u32,
            column: m.col() as u32 + 1,
        }
    }

    /// YAML 1.2 core schema resolution of a plain scalar.
    fn plain(s: &str) -> Value {
        match s {
            "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
            "true" | "True" | "TRUE" => return Value::Bool(true),
            "false" | "False" | "FALSE" => return Value::Bool(false),
            _ => {}
        }
        let int = if let Some(h) = s.strip_prefix("0x") {
            i64::from_str_radix(h, 16).ok()
        } else if let Some(o) = s.strip_prefix("0o") {
            i64::from_str_radix(o, 8).ok()
        } else if s
            .bytes()
            .enumerate()
            .all(|(i, b)| b.is_ascii_digit() || (i == 0 && (b == b'-' || b == b'+')))
        {
            s.parse().ok()
        } else {
            None
        };
        if let Some(i) = int {
            return Value::Int(i);
        }
        let looks_float = s.bytes().any(|b| b.is_ascii_digit())
            && s.bytes()
                .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b));
        match s.parse::<f64>() {
            Ok(f) if looks_float => Value::Float(f),
            _ => Value::Str(s.to_string()),
        }
    }

    impl Builder<'_> {
        fn push_value(&mut self, node: Node) {
            // An item of a list that is the value of a top-level key: the
            // caller may take it.
            let node = match (&mut self.take, self.stack.as_slice()) {
                (
                    Some(take),
                    [(
                        Node {
                            value: Value::Map(_),
                            ..
                        },
                        Some(Node {
                            value: Value::Str(name),
                            ..
                        }),
                        _,
                    ), (
                        Node {
                            value: Value::Seq(_),
                            ..
                        },
                        _,
                        false,
                    )],
                ) => match take(name, node) {
                    Some(node) => node,
                    None => return,
                },
                _ => node,
            };
            match self.stack.last_mut() {
                None => {
                    if self.root.is_none() {
                        self.root = Some(node);
                    }
                }
                Some((parent, pending_key, _)) => match &mut parent.value {
                    Value::Seq(items) => items.push(node),
                    Value::Map(entries) => match pending_key.take() {
                        None => *pending_key = Some(node),
                        Some(key) => entries.push((key, node)),
                    },
                    _ => {}
                },
            }
        }
    }

    impl MarkedEventReceiver for Builder<'_> {
        fn on_event(&mut self, ev: Event, mark: Marker) {
            let p = pos(&mark);
            if self.error.is_some() {
                return;
            }
            if matches!(ev, Event::SequenceStart(..) | Event::MappingStart(..))
                && self.stack.len() >= MAX_DEPTH
            {
                self.error = Some(SyntaxError {
                    pos: Some(p),
                    message: format!(
                        "recursion limit: collections nest more than {MAX_DEPTH} levels deep"
                    ),
                });
                return;
            }
            if matches!(
                ev,
                Event::Scalar(..) | Event::SequenceStart(..) | Event::MappingStart(..)
            ) {
                self.written += 1;
            }
            match ev {
                Event::DocumentStart => {
                    self.documents += 1;
                    if self.documents > 1 && self.error.is_none() {
                        self.error = Some(SyntaxError {
                            pos: Some(p),
                            message: "a manifest is one YAML document; found a second `---`".into(),
                        });
                    }
                }
                Event::Scalar(s, style, anchor, tag) => {
                    let value = match (style, &tag) {
                        (TScalarStyle::Plain, None) => plain(&s),
                        _ => Value::Str(s),
                    };
                    let node = Node { pos: p, value };
                    if anchor > 0 {
                        self.anchors.insert(anchor, node.clone());
                    }
                    self.push_value(node);
                }
                Event::SequenceStart(anchor, _) => {
                    let node = Node {
                        pos: p,
                        value: Value::Seq(Vec::new()),
                    };
                    self.stack.push((node, None, anchor > 0));
                    if anchor > 0 {
                        // Filled in at the end; aliases of open collections are rare.
                        self.anchors.insert(
                            anchor,
                            Node {
                                pos: p,
                                value: Value::Null,
                            },
                        );
                    }
                }
                Event::MappingStart(anchor, _) => {
                    let node = Node {
                        pos: p,
                        value: Value::Map(Vec::new()),
                    };
                    self.stack.push((node, None, anchor > 0));
                    if anchor > 0 {
                        self.anchors.insert(
                            anchor,
                            Node {
                                pos: p,
                                value: Value::Null,
                            },
                        );
                    }
                }
                Event::SequenceEnd | Event::MappingEnd => {
                    if let Some((mut node, _, _)) = self.stack.pop() {
                        let opened = node.pos;
                        // Grown by pushing: give back what doubling left
                        // unused (a mapping of two keys has room for four).
                        match &mut node.value {
                            Value::Map(entries) => entries.shrink_to_fit(),
                            Value::Seq(items) => items.shrink_to_fit(),
                            _ => {}
                        }
                        // yaml-rust2 marks a block mapping at its first `:`;
                        // the mapping starts at its first key.
                        if let Value::Map(entries) = &node.value {
                            if let Some((key, _)) = entries.first() {
                                node.pos = node.pos.min(key.pos);
                            }
                        }
                        for v in self.anchors.values_mut() {
                            if v.pos == opened && v.value == Value::Null {
                                *v = node.clone();
                            }
                        }
                        self.push_value(node);
                    }
                }
                Event::Alias(id) => {
                    let node = self.anchors.get(&id).cloned().unwrap_or(Node {
                        pos: p,
                        value: Value::Null,
                    });
                    self.repeated += size(&node);
                    let budget = self.written.max(MIN_ALIAS_BUDGET);
                    if self.repeated > budget {
                        self.error = Some(SyntaxError {
                            pos: Some(p),
                            message: format!(
                                "aliases repeat more than {budget} values; a manifest that \
                                 large by aliases alone is refused (an alias bomb?)"
                            ),
                        });
                        return;
                    }
                    self.push_value(node);
                }
                _ => {}
            }
        }
    }

    pub fn parse(text: &str) -> Result<Node, SyntaxError> {
        parse_with(text, None)
    }

    /// [`parse`], giving each item of a list that is the value of a
    /// top-level key (`dir:`, `file:`, ...) to `take` with the key as soon
    /// as it is read. `take` keeps it (None: the tree never holds every
    /// rule) or gives it back to be in the tree. Lists with an anchor are
    /// left whole: an alias must repeat all of them.
    pub fn parse_with(text: &str, take: Option<Take<'_>>) -> Result<Node, SyntaxError> {
        let mut builder = Builder {
            take,
            ..Builder::default()
        };
        let mut parser = Parser::new_from_str(text);
        // Event by event (the parser's own loader recurses for every level
        // of nesting), stopping at the first thing the builder refuses.
        loop {
            let (ev, mark) = parser.next_token().map_err(|e| SyntaxError {
                pos: Some(pos(e.marker())),
                message: e.info().to_string(),
            })?;
            let end = ev == Event::StreamEnd;
            builder.on_event(ev, mark);
            if end || builder.error.is_some() {
                break;
            }
        }
        if let Some(err) = builder.error {
            return Err(err);
        }
        Ok(builder.root.unwrap_or(Node {
            pos: Pos { line: 1, column: 1 },
            value: Value::Map(Vec::new()),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: &Node) -> Vec<(String, Pos)> {
        match &n.value {
            Value::Map(e) => e
                .iter()
                .map(|(k, _)| match &k.value {
                    Value::Str(s) => (s.clone(), k.pos),
                    _ => panic!(),
                })
                .collect(),
            _ => panic!("not a map"),
        }
    }

    #[test]
    fn line_index_agrees_with_counting() {
        let text = "ab\n\nçd\ne";
        let lines = Lines::new(text);
        for offset in 0..=text.len() + 2 {
            let o = offset.min(text.len());
            let mut o2 = o;
            while !text.is_char_boundary(o2) {
                o2 -= 1;
            }
            let before = &text[..o2];
            let line = before.matches('\n').count() as u32 + 1;
            let start = before.rfind('\n').map_or(0, |i| i + 1);
            let want = Pos {
                line,
                column: before[start..].chars().count() as u32 + 1,
            };
            assert_eq!(lines.pos(offset), want, "offset {offset}");
            assert_eq!(Lines::new(text).pos(offset), want, "offset {offset}");
        }
        for offset in (0..text.len()).rev() {
            assert_eq!(lines.pos(offset), pos_of(text, offset), "offset {offset}");
        }
    }

    #[test]
    fn toml_positions() {
        let n = toml_doc::parse("a = 1\n\n[b]\n  c = 0o755\n").unwrap();
        let k = keys(&n);
        assert_eq!(k[0], ("a".into(), Pos { line: 1, column: 1 }));
        let Value::Map(e) = &n.value else { panic!() };
        let inner = keys(&e[1].1);
        assert_eq!(inner[0], ("c".into(), Pos { line: 4, column: 3 }));
        let Value::Map(ie) = &e[1].1.value else {
            panic!()
        };
        assert_eq!(ie[0].1.value, Value::Int(0o755));
    }

    /// Table by table and whole, a document gives the same tree, positions
    /// included; documents the table-by-table parse must leave alone are
    /// still read right (by the whole parse).
    #[test]
    fn toml_by_tables_is_the_whole_parse() {
        let docs = [
            "[[dir]]\npath = \"/a\"\n\n[[dir]]\npath = \"/b\"\nmode = \"0755\"\n",
            "# top\ninclude = [\n  \"x.toml\",\n  [1, 2],\n]\nroot = \"r\"\n\n[image]\norder = \"manifest\"\n\n[[file]]\ndst = \"/init\"\nsrc = \"i\"  # c\n\n  [[symlink]]\n  path = \"/bin\"\n  target = \"usr/bin\"\n[[file]]\ndst = '/x'\ninline = { a = 1, b = [ 2 ] }\n\n[defaults]\nuid = 0\n",
            "[[file]]\ndst = \"/a\"\ntext = \"\"\"\n[[not.a.header]]\n[x]\n\"\"\"\n[[file]]\ndst = \"/b\"\n",
            "[[segment]]\nname = \"a\"\n[segment.extra]\nx = 1\n[[segment]]\nname = \"b\"\n",
            "file = []\n[[dir]]\npath = \"/a\"\n",
            "[[dir]]\npath = \"/é\"\n[[dir]]\n  path = \"/ü\"  \n",
            "a.b = 1\n[[a]]\nc = 2\n",
            "[[dir]]\npath = \"/a\"\npath = \"/b\"\n",
            "[image]\nx = 1\n[image]\ny = 2\n[[dir]]\npath = \"/a\"\n",
        ];
        let chunked = [true, true, true, false, true, true, false, false, false];
        for (doc, chunked) in docs.iter().zip(chunked) {
            let lines = Lines::new(doc);
            assert_eq!(
                toml_doc::by_tables(doc, &lines, &mut |_, t| Some(t)).is_some(),
                chunked,
                "{doc}"
            );
            let whole = toml_doc::whole(doc, &lines);
            let parsed = toml_doc::parse(doc);
            match (whole, parsed) {
                (Ok(w), Ok(p)) => assert_eq!(w, p, "{doc}"),
                (Err(w), Err(p)) => {
                    assert_eq!((w.pos, w.message), (p.pos, p.message), "{doc}")
                }
                (w, p) => panic!("{doc}: whole {:?}, by tables {:?}", w.is_ok(), p.is_ok()),
            }
        }
        // Every TOML manifest composer carries or shows.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut seen = 0;
        for dir in ["examples", "profiles", "dist"] {
            for e in walkdir::WalkDir::new(root.join(dir)).into_iter().flatten() {
                if e.path().extension().is_some_and(|x| x == "toml") {
                    let doc = std::fs::read_to_string(e.path()).unwrap();
                    let lines = Lines::new(&doc);
                    let w = toml_doc::whole(&doc, &lines).unwrap();
                    assert_eq!(w, toml_doc::parse(&doc).unwrap(), "{}", e.path().display());
                    seen += 1;
                }
            }
        }
        assert!(seen >= 5, "{seen} manifests");
    }

    #[test]
    fn yaml_positions_and_scalars() {
        let n = yaml_doc::parse("a: 1\nb:\n  - x\n  - '0755'\n  - 0o17\n  - true\n").unwrap();
        let k = keys(&n);
        assert_eq!(k[1], ("b".into(), Pos { line: 2, column: 1 }));
        let Value::Map(e) = &n.value else { panic!() };
        let Value::Seq(items) = &e[1].1.value else {
            panic!()
        };
        assert_eq!(items[0].pos, Pos { line: 3, column: 5 });
        assert_eq!(items[1].value, Value::Str("0755".into()));
        assert_eq!(items[2].value, Value::Int(0o17));
        assert_eq!(items[3].value, Value::Bool(true));
    }

    #[test]
    fn yaml_mappings_start_at_their_first_key() {
        let n = yaml_doc::parse("file:\n  - dst: /x\n    mode: '0644'\n  - {src: /y}\n").unwrap();
        assert_eq!(n.pos, Pos { line: 1, column: 1 });
        let Value::Map(e) = &n.value else { panic!() };
        let Value::Seq(items) = &e[0].1.value else {
            panic!()
        };
        assert_eq!(items[0].pos, Pos { line: 2, column: 5 });
        assert_eq!(items[1].pos, Pos { line: 4, column: 5 });
    }

    #[test]
    fn syntax_errors_have_positions() {
        let e = toml_doc::parse("a = \n").unwrap_err();
        assert_eq!(e.pos.map(|p| p.line), Some(1));
        let e = yaml_doc::parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(e.pos.is_some());
    }
}
