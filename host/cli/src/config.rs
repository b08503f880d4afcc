//! `wfhost serve --config wfhost.toml`: serve's settings from a file, each key named as its flag
//! (`store = "wf.db"`, `http = "127.0.0.1:8080"`, `worker-function = ["payments.charge"]`).
//!
//! The file's settings become flags before clap reads the command line, so that a key takes
//! exactly the values its flag takes and is checked the same way. What the command line gives
//! wins over the environment (`WFHOST_STORE`, ...), which wins over the file: a key whose flag is
//! given, or whose variable is set, is left out. A switch is `true` or `false`; a flag given
//! several times (`--allow-http`) is an array, or one value.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use clap::parser::ValueSource;
use clap::ArgAction;

/// The command line with the settings of serve's `--config` file put in as flags, and which
/// of serve's settings came from the file.
pub(crate) struct Expanded {
    pub(crate) args: Vec<OsString>,
    /// The configuration file, when one was given.
    pub(crate) file: Option<PathBuf>,
    /// The settings (their flags' long names) the file gave, and nothing overrode.
    pub(crate) from_file: Vec<String>,
}

/// `args` (the whole command line) with the settings of `wfhost serve --config FILE` put in
/// after `serve`; as it was for any other command.
pub(crate) fn expand(args: Vec<OsString>) -> anyhow::Result<Expanded> {
    let unchanged = |args| Expanded {
        args,
        file: None,
        from_file: Vec::new(),
    };
    // The subcommand: the first word that is not a (global) flag.
    let Some(serve) = args
        .iter()
        .skip(1)
        .position(|a| !a.to_string_lossy().starts_with('-'))
        .map(|i| i + 1)
    else {
        return Ok(unchanged(args));
    };
    if args[serve] != "serve" {
        return Ok(unchanged(args));
    }
    let given = &args[serve + 1..];
    let Some(file) = flag_value(given, "config") else {
        return Ok(unchanged(args));
    };
    let file = PathBuf::from(file);
    let settings = read(&file)?;
    let command = crate::commands::serve_command();
    let mut flags = Vec::new();
    let mut from_file = Vec::new();
    for (key, value) in &settings {
        let arg = setting(&command, key, &file)?;
        let set = |name: &OsStr| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        // Left out when the command line gives it, or a flag it cannot go with; or when its
        // variable is set (the token's, WFHOST_TOKEN, stands for the token file).
        let overridden = flag_given(given, arg)
            || command
                .get_arguments()
                .any(|other| conflicting(&command, arg, other) && flag_given(given, other))
            || arg.get_env().is_some_and(set)
            || (key == "token-file" && set(OsStr::new("WFHOST_TOKEN")));
        if overridden {
            continue;
        }
        let before = flags.len();
        as_flags(arg, key, value, &mut flags).with_context(|| format!("{}", file.display()))?;
        if flags.len() > before || matches!(arg.get_action(), ArgAction::SetTrue) {
            from_file.push(key.clone());
        }
    }
    let mut expanded = args[..=serve].to_vec();
    expanded.extend(flags);
    expanded.extend_from_slice(given);
    Ok(Expanded {
        args: expanded,
        file: Some(file),
        from_file,
    })
}

/// Whether clap's `error` is about a setting the file gave (`from_file`), or about one it
/// leaves out (a required one).
pub(crate) fn about_the_file(error: &clap::Error, from_file: &[String]) -> bool {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() == ErrorKind::MissingRequiredArgument {
        return true;
    }
    match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => {
            let long = arg.trim_start_matches('-');
            let long = long.split([' ', '=']).next().unwrap_or_default();
            from_file.iter().any(|f| f == long)
        }
        _ => false,
    }
}

/// A clap error about settings that came from `file`, in one line that names the file.
pub(crate) fn refused(file: &Path, error: &clap::Error) -> anyhow::Error {
    // Clap's message, up to its usage and tips, in one line.
    let rendered = error.render().to_string();
    let said: Vec<&str> = rendered
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let said = said.join(" ");
    let said = said.strip_prefix("error: ").unwrap_or(&said);
    anyhow::anyhow!(
        "{}: {said} (each key is read as its flag: `max-wait = \"2m\"` is `--max-wait=2m`)",
        file.display()
    )
}

/// The file's settings.
fn read(file: &Path) -> anyhow::Result<toml::Table> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the configuration file {}", file.display()))?;
    text.parse::<toml::Table>().map_err(|e| {
        anyhow::anyhow!(
            "{} is not TOML: {}",
            file.display(),
            e.to_string().trim_end()
        )
    })
}

/// The flag `key` names, or why none does.
fn setting<'a>(
    command: &'a clap::Command,
    key: &str,
    file: &Path,
) -> anyhow::Result<&'a clap::Arg> {
    if key == "config" {
        bail!(
            "{}: `config` names another file; a configuration file does not include others",
            file.display()
        );
    }
    let settings = || command.get_arguments().filter(|a| !a.is_hide_set());
    if let Some(arg) = settings().find(|a| a.get_long() == Some(key)) {
        return Ok(arg);
    }
    let near = settings()
        .filter_map(|a| a.get_long())
        .map(|long| (strsim::jaro_winkler(key, long), long))
        .filter(|(score, _)| *score > 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let hint = match near {
        Some((_, long)) => format!(" (did you mean `{long}`?)"),
        None => String::new(),
    };
    bail!(
        "{}: `{key}` is not a setting of `wfhost serve`{hint}: a key is one of serve's flags \
         without its dashes (`wfhost serve --help` lists them)",
        file.display()
    )
}

/// `value` as the flags of `arg`.
fn as_flags(
    arg: &clap::Arg,
    key: &str,
    value: &toml::Value,
    flags: &mut Vec<OsString>,
) -> anyhow::Result<()> {
    let flag = |text: String| OsString::from(format!("--{key}={text}"));
    match arg.get_action() {
        ArgAction::SetTrue => match value {
            toml::Value::Boolean(true) => flags.push(OsString::from(format!("--{key}"))),
            toml::Value::Boolean(false) => {}
            other => bail!(
                "`{key}` is a switch: write `{key} = true` (or false), not {}",
                other.type_str()
            ),
        },
        ArgAction::Append => match value {
            toml::Value::Array(values) => {
                for value in values {
                    flags.push(flag(scalar(key, value)?));
                }
            }
            value => flags.push(flag(scalar(key, value)?)),
        },
        _ => flags.push(flag(scalar(key, value)?)),
    }
    Ok(())
}

/// One value as its flag takes it.
fn scalar(key: &str, value: &toml::Value) -> anyhow::Result<String> {
    Ok(match value {
        toml::Value::String(text) => text.clone(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(x) => x.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(_) => {
            bail!("`{key}` takes one value, not an array (its flag is given once)")
        }
        toml::Value::Table(_) => bail!("`{key}` is a table; give it a value: `{key} = \"...\"`"),
    })
}

/// Whether `a` and `b` cannot be given together (either says so).
fn conflicting(command: &clap::Command, a: &clap::Arg, b: &clap::Arg) -> bool {
    let names = |arg: &clap::Arg| -> Vec<String> {
        command
            .get_arg_conflicts_with(arg)
            .iter()
            .map(|c| c.get_id().to_string())
            .collect()
    };
    names(a).contains(&b.get_id().to_string()) || names(b).contains(&a.get_id().to_string())
}

/// The value of `--name VALUE` or `--name=VALUE` in `args`.
fn flag_value(args: &[OsString], name: &str) -> Option<OsString> {
    let long = format!("--{name}");
    let with = format!("--{name}=");
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            return None;
        }
        if *arg == *long {
            return args.next().cloned();
        }
        if let Some(value) = arg.to_str().and_then(|a| a.strip_prefix(&with)) {
            return Some(value.into());
        }
    }
    None
}

/// Whether `args` give `arg`'s flag.
fn flag_given(args: &[OsString], arg: &clap::Arg) -> bool {
    let long = arg.get_long().map(|l| format!("--{l}"));
    let short = arg.get_short().map(|s| format!("-{s}"));
    args.iter().map(|a| a.to_string_lossy()).any(|a| {
        long.as_deref()
            .is_some_and(|l| a == l || a.starts_with(&format!("{l}=")))
            || short.as_deref().is_some_and(|s| a.starts_with(s))
    })
}

/// The settings serve runs with that are not defaults, each with where it came from, secrets
/// masked: `store=postgres://wf:***@db/wf (file)`.
pub(crate) fn effective(
    command: &clap::Command,
    matches: &clap::ArgMatches,
    from_file: &[String],
) -> String {
    let mut settings = BTreeMap::new();
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        let (Some(long), Some(source)) = (arg.get_long(), matches.value_source(id)) else {
            continue;
        };
        if long == "config" {
            continue;
        }
        let from = match source {
            ValueSource::DefaultValue => continue,
            ValueSource::EnvVariable => "env",
            _ if from_file.iter().any(|f| f == long) => "file",
            _ => "flag",
        };
        let values: Vec<String> = match matches.get_raw(id) {
            Some(raw) => raw.map(|v| masked(long, v)).collect(),
            None => continue,
        };
        let shown = if values.is_empty() {
            "true".to_string()
        } else {
            values.join(",")
        };
        settings.insert(long.to_string(), format!("{long}={shown} ({from})"));
    }
    settings.into_values().collect::<Vec<_>>().join(", ")
}

/// A setting's value as it may be shown: a password in a URL or a connection string, and a
/// token given as a value, masked.
fn masked(long: &str, value: &OsStr) -> String {
    let text = value.to_string_lossy();
    if long.contains("token") && !long.ends_with("file") {
        return "***".into();
    }
    // scheme://user:password@host
    if text.contains("://") {
        return wfhost::store::redact(&text);
    }
    // key=value connection strings: password=..., password = '...'
    if text.contains("password") {
        return masked_password(&text);
    }
    text.into_owned()
}

/// A `key=value` connection string (libpq's, as PostgreSQL's clients read it: blanks around
/// `=`, values quoted with `'` and `\` escapes) with its password's value masked.
fn masked_password(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("password") {
        out.push_str(&rest[..at + "password".len()]);
        rest = &rest[at + "password".len()..];
        let after_key = rest.trim_start();
        let Some(value) = after_key.strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start();
        out.push_str("=***");
        // The value: quoted up to its closing quote, or up to the next blank.
        let end = if let Some(quoted) = value.strip_prefix('\'') {
            let mut chars = quoted.char_indices();
            let mut close = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '\'' => {
                        close = i + 1;
                        break;
                    }
                    _ => {}
                }
            }
            1 + close
        } else {
            value.find(char::is_whitespace).unwrap_or(value.len())
        };
        rest = &value[end.min(value.len())..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked() {
        assert_eq!(
            masked("store", OsStr::new("postgres://wf:hunter2@db:5432/wf")),
            "postgres://wf:***@db:5432/wf"
        );
        assert_eq!(
            masked("store", OsStr::new("host=db user=wf password=hunter2")),
            "host=db user=wf password=***"
        );
        assert_eq!(
            masked("store", OsStr::new("host=db password = hunter2 dbname=wf")),
            "host=db password=*** dbname=wf"
        );
        assert_eq!(
            masked("store", OsStr::new("password='hunter 2\\' x' dbname=wf")),
            "password=*** dbname=wf"
        );
        assert_eq!(masked("store", OsStr::new("password")), "password");
        assert_eq!(masked("store", OsStr::new("wf.db")), "wf.db");
        assert_eq!(
            masked("token-file", OsStr::new("/etc/wf.token")),
            "/etc/wf.token"
        );
    }

    #[test]
    fn a_flag_is_found_in_both_its_forms() {
        let args: Vec<OsString> = ["--http", "x", "--config=wf.toml"]
            .map(OsString::from)
            .into();
        assert_eq!(flag_value(&args, "config"), Some("wf.toml".into()));
        assert_eq!(flag_value(&args, "http"), Some("x".into()));
        assert_eq!(flag_value(&args, "store"), None);
    }
}
