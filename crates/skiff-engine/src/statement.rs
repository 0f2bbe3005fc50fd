//! Statement text handling: splitting a script into statements and
//! recognising Skiff's own `EXPLAIN [ANALYZE] PIPELINES` prefix, which
//! DataFusion's parser does not know.

/// What a statement asks for, as far as Skiff is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatementKind<'a> {
    /// Anything DataFusion handles: queries, DDL, SET, EXPLAIN, ...
    Sql(&'a str),
    /// `EXPLAIN [ANALYZE] PIPELINES <query>`.
    ExplainPipelines { analyze: bool, query: &'a str },
}

/// Classify one statement (no trailing semicolon needed).
pub fn classify(statement: &str) -> StatementKind<'_> {
    let mut rest = skip_blanks(statement);
    let Some(after) = strip_keyword(rest, "EXPLAIN") else {
        return StatementKind::Sql(statement);
    };
    rest = after;
    let analyze = match strip_keyword(rest, "ANALYZE") {
        Some(after) => {
            rest = after;
            true
        }
        None => false,
    };
    match strip_keyword(rest, "PIPELINES") {
        Some(query) => StatementKind::ExplainPipelines { analyze, query },
        None => StatementKind::Sql(statement),
    }
}

/// `text` without leading whitespace and comments.
fn skip_blanks(text: &str) -> &str {
    let mut rest = text.trim_start();
    loop {
        if let Some(comment) = rest.strip_prefix("--") {
            rest = comment
                .find('\n')
                .map_or("", |n| &comment[n + 1..])
                .trim_start();
        } else if let Some(comment) = rest.strip_prefix("/*") {
            rest = comment
                .find("*/")
                .map_or("", |n| &comment[n + 2..])
                .trim_start();
        } else {
            return rest;
        }
    }
}

/// `text` without a leading case-insensitive `keyword` followed by
/// whitespace (or the end), and without that whitespace.
fn strip_keyword<'a>(text: &'a str, keyword: &str) -> Option<&'a str> {
    let head = text.get(..keyword.len())?;
    if !head.eq_ignore_ascii_case(keyword) {
        return None;
    }
    let tail = &text[keyword.len()..];
    match tail.chars().next() {
        None => Some(tail),
        Some(c) if c.is_whitespace() => Some(tail.trim_start()),
        Some(_) => None,
    }
}

/// Split a script at top-level semicolons. Quotes ('..', "..", $$..$$) and
/// comments (-- and /* */) are respected; empty statements are dropped.
pub fn split_statements(script: &str) -> Vec<&str> {
    let mut statements = Vec::new();
    let mut start = 0;
    for end in top_level_semicolons(script) {
        statements.push(&script[start..end]);
        start = end + 1;
    }
    statements.push(&script[start..]);
    statements
        .into_iter()
        .filter(|s| !is_blank(s))
        .map(str::trim)
        .collect()
}

/// True when `text` ends with a complete statement: a top-level semicolon
/// followed by nothing but blanks. The shell uses it to know a multi-line
/// statement is complete.
pub fn is_complete(text: &str) -> bool {
    top_level_semicolons(text)
        .last()
        .is_some_and(|&end| is_blank(&text[end + 1..]))
}

/// Byte offsets of the semicolons outside quotes and comments.
fn top_level_semicolons(script: &str) -> Vec<usize> {
    top_level(script, b';')
}

/// `sql` with positional `?` placeholders (JDBC, ODBC, ADBC) numbered as
/// DataFusion's `$1`, `$2`, ...; `?` inside quotes and comments stays.
pub fn number_placeholders(sql: &str) -> std::borrow::Cow<'_, str> {
    let marks = top_level(sql, b'?');
    if marks.is_empty() {
        return std::borrow::Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len() + 2 * marks.len());
    let mut start = 0;
    for (n, at) in marks.into_iter().enumerate() {
        out.push_str(&sql[start..at]);
        out.push_str(&format!("${}", n + 1));
        start = at + 1;
    }
    out.push_str(&sql[start..]);
    std::borrow::Cow::Owned(out)
}

/// The highest `$n` placeholder outside quotes and comments; 0 for none.
pub fn highest_placeholder(sql: &str) -> usize {
    let bytes = sql.as_bytes();
    top_level(sql, b'$')
        .into_iter()
        .filter_map(|at| {
            let digits = bytes[at + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            sql.get(at + 1..at + 1 + digits)?.parse().ok()
        })
        .max()
        .unwrap_or(0)
}

/// Byte offsets of `wanted` outside quotes and comments.
fn top_level(script: &str, wanted: u8) -> Vec<usize> {
    let bytes = script.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if let Some(end) = skip_literal(bytes, i) {
            i = end;
            continue;
        }
        match bytes[i] {
            b if b == wanted => {
                found.push(i);
                i += 1;
            }
            _ => i += 1,
        }
    }
    found
}

/// Most operators [`longest_operator_chain`] may find in a statement
/// planned. Measured: a chain of 1,000 additions plans, ships and runs on
/// 2 MiB thread stacks in a debug build; 2,000 overflowed the
/// coordinator's stack in `Expr::clone`.
pub const MAX_OPERATOR_CHAIN: usize = 1000;

/// Refuse a statement whose expressions are too deep to plan safely, with
/// a message that says what to do instead.
pub fn check_complexity(sql: &str) -> Result<(), String> {
    let chain = longest_operator_chain(sql);
    if chain <= MAX_OPERATOR_CHAIN {
        return Ok(());
    }
    Err(format!(
        "statement too complex: an expression chains {chain} operators, at most \
         {MAX_OPERATOR_CHAIN} are planned (write long OR lists as IN (...), split long sums)"
    ))
}

/// The most binary operators chained at one level of one expression: a
/// parser turns `a + b + ... + z` into a tree as deep as the chain without
/// counting it against its recursion limit, and every later walk of that
/// tree (cloning, planning, serializing, evaluating) recurses once per
/// operator. Counts runs of operator symbols and the words `AND` and `OR`
/// outside quotes and comments; a comma or a parenthesis ends a chain.
/// An upper bound (a unary minus counts too), cheap enough to run on any
/// statement before it is parsed.
pub fn longest_operator_chain(sql: &str) -> usize {
    let bytes = sql.as_bytes();
    // The chain at each open parenthesis level, innermost last.
    let mut chains = vec![0usize];
    let mut longest = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(end) = skip_literal(bytes, i) {
            i = end;
            continue;
        }
        let mut operator = false;
        match bytes[i] {
            b'(' => {
                chains.push(0);
                i += 1;
            }
            b')' => {
                if chains.len() > 1 {
                    chains.pop();
                }
                i += 1;
            }
            b',' | b';' => {
                if let Some(chain) = chains.last_mut() {
                    *chain = 0;
                }
                i += 1;
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'|' | b'&' | b'^' | b'<' | b'>' | b'=' | b'!' => {
                operator = true;
                while i < bytes.len() && b"+-*/%|&^<>=!".contains(&bytes[i]) {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let word = &sql[start..i];
                operator = word.eq_ignore_ascii_case("AND") || word.eq_ignore_ascii_case("OR");
            }
            _ => i += 1,
        }
        if operator && let Some(chain) = chains.last_mut() {
            *chain += 1;
            longest = longest.max(*chain);
        }
    }
    longest
}

/// Whether `f` holds for a word of `sql` (a run of ASCII letters, digits
/// and `_`) outside quotes and comments.
pub fn any_word(sql: &str, mut f: impl FnMut(&str) -> bool) -> bool {
    let bytes = sql.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if let Some(end) = skip_literal(bytes, i) {
            i = end;
            continue;
        }
        if !is_word(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_word(bytes[i]) {
            i += 1;
        }
        if f(&sql[start..i]) {
            return true;
        }
    }
    false
}

/// True when `text` holds nothing but whitespace and comments.
pub fn is_blank(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                i = memchr(bytes, i, b'\n').map_or(bytes.len(), |n| n + 1)
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = find(bytes, i + 2, b"*/").map_or(bytes.len(), |n| n + 2)
            }
            c if c.is_ascii_whitespace() => i += 1,
            _ => return false,
        }
    }
    true
}

/// Where the quoted text or comment that starts at `i` ends, if one does:
/// '...', "...", -- to the end of the line, /* ... */, $$ ... $$.
fn skip_literal(bytes: &[u8], i: usize) -> Option<usize> {
    let next = bytes.get(i + 1);
    Some(match bytes[i] {
        b'\'' | b'"' => skip_quoted(bytes, i),
        b'-' if next == Some(&b'-') => memchr(bytes, i, b'\n').map_or(bytes.len(), |n| n + 1),
        b'/' if next == Some(&b'*') => find(bytes, i + 2, b"*/").map_or(bytes.len(), |n| n + 2),
        b'$' if next == Some(&b'$') => find(bytes, i + 2, b"$$").map_or(bytes.len(), |n| n + 2),
        _ => return None,
    })
}

fn skip_quoted(bytes: &[u8], open: usize) -> usize {
    let quote = bytes[open];
    let mut i = open + 1;
    while i < bytes.len() {
        if bytes[i] == quote {
            // A doubled quote is an escaped quote.
            if bytes.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    bytes.len()
}

fn memchr(bytes: &[u8], from: usize, needle: u8) -> Option<usize> {
    bytes[from..]
        .iter()
        .position(|&b| b == needle)
        .map(|p| p + from)
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_found_outside_quotes_and_comments() {
        let pg = |sql: &str| any_word(sql, |w| w.starts_with("pg_"));
        assert!(pg("SELECT * FROM pg_catalog.pg_class"));
        assert!(!pg(
            "SELECT 'pg_class', \"pg_x\" -- pg_y\n/* pg_z */ FROM t"
        ));
        assert!(!pg("SELECT apg_b FROM t"));
    }

    #[test]
    fn the_highest_placeholder_outside_quotes() {
        assert_eq!(highest_placeholder("SELECT 1"), 0);
        assert_eq!(highest_placeholder("SELECT $2, $10, $3"), 10);
        assert_eq!(highest_placeholder("SELECT '$7', $1 -- $9"), 1);
        assert_eq!(highest_placeholder("SELECT $$ $5 $$, $"), 0);
    }

    #[test]
    fn operator_chains_are_counted_per_level_outside_quotes() {
        assert_eq!(longest_operator_chain("SELECT 1"), 0);
        assert_eq!(longest_operator_chain("SELECT a + b - c"), 2);
        assert_eq!(longest_operator_chain("SELECT a + b, c * d * e"), 2);
        assert_eq!(longest_operator_chain("SELECT (a + b) * (c + d + e)"), 2);
        assert_eq!(
            longest_operator_chain("SELECT x WHERE a = 1 OR a = 2 or a >= 3"),
            5
        );
        assert_eq!(longest_operator_chain("SELECT 'a + b + c' || \"x+y\""), 1);
        assert_eq!(longest_operator_chain("SELECT 1 -- + + +\n"), 0);
        assert_eq!(longest_operator_chain("SELECT 1 /* + + */"), 0);
        assert_eq!(longest_operator_chain("SELECT orders, android FROM t"), 0);
        let chain = vec!["id"; 5000].join(" + ");
        assert_eq!(longest_operator_chain(&format!("SELECT {chain}")), 4999);
        assert_eq!(longest_operator_chain(") ) ) a + b"), 1);
    }

    #[test]
    fn positional_placeholders_are_numbered() {
        assert_eq!(
            number_placeholders("SELECT a FROM t WHERE a = ? AND b = '?' AND c > ? -- ?"),
            "SELECT a FROM t WHERE a = $1 AND b = '?' AND c > $2 -- ?"
        );
        assert!(matches!(
            number_placeholders("SELECT $1"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn classifies_explain_pipelines() {
        assert_eq!(
            classify("explain pipelines select 1"),
            StatementKind::ExplainPipelines {
                analyze: false,
                query: "select 1"
            }
        );
        assert_eq!(
            classify("  EXPLAIN ANALYZE\n PIPELINES select 1"),
            StatementKind::ExplainPipelines {
                analyze: true,
                query: "select 1"
            }
        );
        assert_eq!(
            classify("explain select 1"),
            StatementKind::Sql("explain select 1")
        );
        assert_eq!(
            classify("explain pipelinesx"),
            StatementKind::Sql("explain pipelinesx")
        );
        assert_eq!(classify("select 1"), StatementKind::Sql("select 1"));
        assert_eq!(
            classify("-- why\n/* how */ EXPLAIN PIPELINES select 1"),
            StatementKind::ExplainPipelines {
                analyze: false,
                query: "select 1"
            }
        );
    }

    #[test]
    fn splits_respecting_quotes_and_comments() {
        let script = "select ';'; -- a; comment\nselect \"a;b\" /* ; */ ;\n\n  ;select 3";
        assert_eq!(
            split_statements(script),
            vec![
                "select ';'",
                "-- a; comment\nselect \"a;b\" /* ; */",
                "select 3"
            ]
        );
        assert_eq!(
            split_statements("select 'it''s; fine'"),
            vec!["select 'it''s; fine'"]
        );
        assert!(split_statements(" -- only a comment\n").is_empty());
    }

    #[test]
    fn knows_when_a_statement_is_complete() {
        assert!(is_complete("select 1;"));
        assert!(is_complete("select 1;  \n"));
        assert!(!is_complete("select 1"));
        assert!(!is_complete("select ';"));
        assert!(!is_complete("select 1 -- ;"));
        assert!(is_complete("select 1; select 2;"));
    }
}
