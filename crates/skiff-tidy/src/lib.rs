//! Style rules that a test enforces so reviewers do not have to: see
//! `tests/tidy.rs`. Owns no runtime code.
