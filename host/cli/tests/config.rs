//! `wfhost serve --config FILE` and `wfhost config check FILE`: every setting of serve from a
//! TOML file, each key named as its flag; flags over the environment over the file.

mod common;

use std::path::Path;
use std::process::Stdio;

use common::http::raw;
use common::{tempdir, text, wait_until, wfhost};

fn check(file: &Path) -> (i32, String, String) {
    let output = wfhost()
        .args(["config", "check"])
        .arg(file)
        .env_remove("WFHOST_MODULE_CACHE")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// Starts `wfhost serve` with `args` and `env` and waits for its settings line and its
/// address: the settings line, the address, the child.
fn serve(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (String, String, std::process::Child) {
    let log = dir.join("serve.log");
    let mut command = wfhost();
    command
        .arg("serve")
        .args(args)
        .env_remove("WFHOST_STORE")
        .env_remove("WFHOST_TOKEN")
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("the server serves", || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("serve exited ({status}): {}", read());
        }
        read().contains("listens on ") && read().contains("serving ")
    });
    let log = read();
    let settings = log
        .lines()
        .find(|l| l.contains("settings"))
        .unwrap()
        .to_string();
    let line = log.lines().find(|l| l.contains("listens on ")).unwrap();
    let addr = line
        .split("listens on http://")
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    (settings, addr, child)
}

#[test]
fn a_file_gives_serve_every_setting_it_names() {
    let dir = tempdir("config", "file");
    let file = dir.join("wfhost.toml");
    std::fs::write(
        &file,
        "# The shop's server\nstore = \"wf.db\"\nhttp = \"127.0.0.1:0\"\n\
         worker-function = [\"payments.charge\", \"inventory.reserve\"]\n\
         allow-http = \"https://api.example.com/*\"\ngrace = \"1s\"\nlease = \"1s\"\n",
    )
    .unwrap();
    let (settings, addr, mut child) = serve(&dir, &["--config", file.to_str().unwrap()], &[]);
    // The settings in words, in order (the tests' module cache comes from the environment).
    assert!(
        settings.ends_with(&format!(
            "allow-http=https://api.example.com/* (file), grace=1s (file), \
             http=127.0.0.1:0 (file), lease=1s (file), \
             module-cache={} (env), store=wf.db (file), \
             worker-function=payments.charge,inventory.reserve (file)",
            std::env::temp_dir()
                .join("wfhost-tests-module-cache")
                .display()
        )),
        "{settings}"
    );
    // Its worker functions are served: a poll finds no task (204), not "no workers" (404).
    let body = r#"{"functions": ["inventory.reserve"], "wait": "0s"}"#;
    let request = format!(
        "POST /v1/tasks/poll HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(raw(&addr, request.as_bytes()).0, 204);
    assert!(dir.join("wf.db").exists());
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn flags_win_over_the_environment_which_wins_over_the_file() {
    let dir = tempdir("config", "precedence");
    let file = dir.join("wfhost.toml");
    std::fs::write(
        &file,
        "store = \"from-file.db\"\nhttp = \"127.0.0.1:0\"\ngrace = \"1s\"\nmax-waiting = 7\n\
         on-demand = true\n",
    )
    .unwrap();
    let (settings, _, mut child) = serve(
        &dir,
        // --pooling cannot go with the file's on-demand: the flag wins, the file's is left out.
        &[
            "--config",
            file.to_str().unwrap(),
            "--grace",
            "2s",
            "--pooling",
            "8",
        ],
        &[("WFHOST_STORE", "from-env.db")],
    );
    for expected in [
        "grace=2s (flag)",
        "store=from-env.db (env)",
        "max-waiting=7 (file)",
        "http=127.0.0.1:0 (file)",
        "pooling=8 (flag)",
    ] {
        assert!(settings.contains(expected), "{expected} in {settings}");
    }
    assert!(!settings.contains("from-file.db"), "{settings}");
    assert!(!settings.contains("on-demand"), "{settings}");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(dir.join("from-env.db").exists() && !dir.join("from-file.db").exists());
}

#[test]
fn a_check_says_what_is_wrong_and_masks_secrets() {
    let dir = tempdir("config", "check");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let good = write(
        "good.toml",
        "store = \"postgres://wf:hunter2@127.0.0.1:1/wf\"\nhttp = \"127.0.0.1:8080\"\n\
         worker-function = \"payments.charge\"\nallow-private-http = true\non-demand = false\n",
    );
    let (code, out, err) = check(&good);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "{}: ok\n  allow-private-http=true (file)\n  http=127.0.0.1:8080 (file)\n  \
             store=postgres://wf:***@127.0.0.1:1/wf (file)\n  \
             worker-function=payments.charge (file)\n",
            good.display()
        )
    );
    assert!(!out.contains("hunter2") && !err.contains("hunter2"));

    for (name, text, says) in [
        ("typo.toml", "store = \"wf.db\"\nhtp = \"x\"\n", "`htp` is not a setting of `wfhost serve` (did you mean `http`?)"),
        ("value.toml", "store = \"wf.db\"\ngrace = \"soon\"\n", "invalid value 'soon' for '--grace <DURATION>'"),
        ("switch.toml", "store = \"wf.db\"\nallow-private-http = \"yes\"\n", "`allow-private-http` is a switch: write `allow-private-http = true` (or false), not string"),
        ("array.toml", "store = \"wf.db\"\ngrace = [\"1s\", \"2s\"]\n", "`grace` takes one value, not an array"),
        ("syntax.toml", "store = [1,\n", "is not TOML"),
        ("nested.toml", "store = \"wf.db\"\nconfig = \"other.toml\"\n", "`config` names another file"),
        ("workers.toml", "store = \"wf.db\"\nworker-function = \"a.b\"\n", "--worker-function needs --http"),
        ("missing.toml", "http = \"127.0.0.1:8080\"\n", "--store <STORE>"),
        ("otlp.toml", "store = \"wf.db\"\notlp-endpoint = \"localhost:4318\"\n", "the OTLP endpoint 'localhost:4318' is not an http:// or https:// URL"),
    ] {
        let (code, out, err) = check(&write(name, text));
        assert_eq!((code, out.as_str()), (2, ""), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("error:")).count(), 1, "{name}: {err}");
    }
    // WFHOST_TOKEN stands for the token file, as a flag's variable does for its flag.
    let token = write("token", "s3cret\n");
    let with_token = write(
        "token.toml",
        &format!("store = \"wf.db\"\ntoken-file = \"{}\"\n", token.display()),
    );
    let (code, out, err) = check(&with_token);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("token-file="), "{out}");
    let output = wfhost()
        .args(["config", "check"])
        .arg(&with_token)
        .env_remove("WFHOST_MODULE_CACHE")
        .env("WFHOST_TOKEN", "from-the-environment")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        !text(&output.stdout).contains("token-file="),
        "{}",
        text(&output.stdout)
    );

    let (code, _, err) = check(&dir.join("absent.toml"));
    assert_eq!(code, 2);
    assert!(err.contains("cannot read the configuration file"), "{err}");
}
