//! The interactive shell: line editing with history, multi-line statements
//! ended by `;`, and backslash commands.

use std::io::Write;
use std::path::{Path, PathBuf};

use datafusion::error::Result;
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use skiff_engine::Engine;
use skiff_engine::statement::{is_blank, is_complete, split_statements};

use crate::args::Format;
use crate::run::run_statement;

const HELP: &str = "\
Statements end with ';' and may span lines. EXPLAIN PIPELINES <query> shows the
pipeline graph; EXPLAIN ANALYZE PIPELINES <query> runs it and adds measurements.
  \\d          list tables
  \\d TABLE    describe a table
  \\timing     toggle printing of elapsed time
  \\help       this text
  \\q          quit (Ctrl-D works too)
Ctrl-C cancels the running query or clears the current input.";

/// Shell settings.
pub struct Shell {
    engine: Engine,
    format: Format,
    timing: bool,
    history: Option<PathBuf>,
}

enum Control {
    Continue,
    Quit,
}

impl Shell {
    pub fn new(engine: Engine, format: Format, history: Option<PathBuf>) -> Self {
        Self {
            engine,
            format,
            timing: true,
            history,
        }
    }

    pub async fn run(mut self, data_dir: &Path) -> Result<()> {
        let mut editor = DefaultEditor::new().map_err(editor_error)?;
        if let Some(history) = &self.history {
            let _ = editor.load_history(history);
        }
        println!(
            "Skiff {} — data: {}. Type \\help for help.",
            env!("CARGO_PKG_VERSION"),
            data_dir.display()
        );
        let mut buffer = String::new();
        loop {
            let prompt = if buffer.is_empty() {
                "skiff> "
            } else {
                "   ...> "
            };
            match editor.readline(prompt) {
                Ok(line) => {
                    if buffer.is_empty() && line.trim_start().starts_with('\\') {
                        let _ = editor.add_history_entry(line.as_str());
                        if let Control::Quit = self.command(line.trim()).await {
                            break;
                        }
                        continue;
                    }
                    buffer.push_str(&line);
                    buffer.push('\n');
                    if is_complete(&buffer) {
                        let _ = editor.add_history_entry(buffer.trim_end());
                        let script = std::mem::take(&mut buffer);
                        self.run_script(&script).await;
                    } else if is_blank(&buffer) {
                        buffer.clear();
                    }
                }
                Err(ReadlineError::Interrupted) => buffer.clear(),
                Err(ReadlineError::Eof) => break,
                Err(e) => return Err(editor_error(e)),
            }
        }
        if let Some(history) = &self.history {
            if let Some(dir) = history.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = editor.save_history(history);
        }
        Ok(())
    }

    /// Run each statement; an error ends the script but not the shell.
    async fn run_script(&self, script: &str) {
        for statement in split_statements(script) {
            let mut out = std::io::stdout();
            let run = run_statement(&self.engine, statement, self.format, false, &mut out);
            let outcome = tokio::select! {
                outcome = run => outcome,
                _ = tokio::signal::ctrl_c() => {
                    eprintln!("query cancelled");
                    return;
                }
            };
            match outcome {
                Ok(run) if self.timing => {
                    println!("{} rows in {:.3} s", run.rows, run.elapsed.as_secs_f64())
                }
                Ok(_) => {}
                Err(e) => {
                    eprintln!("{}", crate::output::error_line(&e));
                    return;
                }
            }
        }
    }

    async fn command(&mut self, line: &str) -> Control {
        let mut words = line.split_whitespace();
        let command = words.next().unwrap_or_default();
        let argument = words.next();
        let sql = match (command, argument) {
            ("\\q" | "\\quit", _) => return Control::Quit,
            ("\\help" | "\\?" | "\\h", _) => {
                println!("{HELP}");
                return Control::Continue;
            }
            ("\\timing", _) => {
                self.timing = !self.timing;
                println!("timing is {}", if self.timing { "on" } else { "off" });
                return Control::Continue;
            }
            ("\\d", None) => "SELECT table_name, table_type FROM information_schema.tables \
                 WHERE table_schema = 'public' ORDER BY table_name"
                .to_string(),
            ("\\d", Some(table)) => format!("DESCRIBE {table}"),
            _ => {
                eprintln!("unknown command {command}; \\help lists the commands");
                return Control::Continue;
            }
        };
        let mut out = std::io::stdout();
        if let Err(e) = run_statement(&self.engine, &sql, self.format, false, &mut out).await {
            eprintln!("{}", crate::output::error_line(&e));
        }
        let _ = out.flush();
        Control::Continue
    }
}

fn editor_error(e: ReadlineError) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(e))
}
