//! Sizes and durations as the flags take them.

use std::time::Duration;

/// "64MiB", "512KiB", "2GiB", "1000B". A bare number is refused: `--max-memory 64` meant 64 MiB
/// once, and 64 bytes would be a surprise either way.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: usize = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size: use e.g. 64MiB, 512KiB or 2GiB"))?;
    let shift = match unit.trim() {
        "" => {
            return Err(format!(
                "'{text}' needs a unit: {text}MiB, {text}KiB or {text}B"
            ))
        }
        "B" => 0,
        "K" | "KiB" | "k" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        other => {
            return Err(format!(
                "'{text}': unknown unit '{other}' (use KiB, MiB or GiB)"
            ))
        }
    };
    number
        .checked_mul(1usize << shift)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// A duration flag, in the one grammar every side of wfhost reads (`500ms`, `30s`, `10m`, `12h`,
/// `30d`; see `wfhost_client::duration`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    wfhost_client::duration::parse(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse_with_their_units() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1000B"), Ok(1000));
        assert_eq!(
            parse_size("64"),
            Err("'64' needs a unit: 64MiB, 64KiB or 64B".into())
        );
        assert!(parse_size("64mb")
            .unwrap_err()
            .contains("unknown unit 'mb'"));
        assert!(parse_size("lots").unwrap_err().contains("is not a size"));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("30")
            .unwrap_err()
            .contains("give a number and a unit"));
    }
}
