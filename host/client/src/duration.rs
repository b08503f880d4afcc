//! Durations as people write them, the one grammar every side of wfhost reads: the CLI's flags,
//! the HTTP API's `wait`, `older_than` and `jitter`, a client's waits, a server's retention.
//!
//! A duration is a number and a unit, with nothing between them: `500ms`, `30s`, `1.5m`, `12h`,
//! `30d`. The number may have a fraction; the units are `ms`, `s`, `m`, `h` and `d`. A bare number
//! is refused (is `30` seconds or days?), and so is anything past a hundred years.

use std::fmt;
use std::time::Duration;

/// The longest duration read: a hundred years.
pub const MAX: Duration = Duration::from_secs(100 * 365 * 86_400);

/// A text that is not a duration; it says what is wrong and what to write instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurationError {
    text: String,
    why: &'static str,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "'{}' is not a duration ({}): give a number and a unit, e.g. 500ms, 30s, 10m, 12h \
             or 30d",
            self.text, self.why
        )
    }
}

impl std::error::Error for DurationError {}

/// Reads `text` as a duration (`500ms`, `30s`, `1.5m`, `12h`, `30d`); spaces around it are
/// ignored.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let fail = |why| DurationError {
        text: text.to_string(),
        why,
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or_else(|| {
            fail(if trimmed.is_empty() {
                "it is empty"
            } else {
                "no unit"
            })
        })?;
    let (number, unit) = trimmed.split_at(split);
    if number.is_empty() {
        return Err(fail("no number"));
    }
    let number: f64 = number.parse().map_err(|_| fail("the number is not one"))?;
    let seconds = match unit {
        "ms" => number / 1_000.0,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3_600.0,
        "d" => number * 86_400.0,
        _ => return Err(fail("the unit is not one of ms, s, m, h and d")),
    };
    if !seconds.is_finite() || seconds > MAX.as_secs_f64() {
        return Err(fail("it is longer than a hundred years"));
    }
    // Whole milliseconds read exactly, without a float's rounding.
    let exact = match unit {
        "ms" => number.fract() == 0.0 && number <= u64::MAX as f64,
        _ => false,
    };
    Ok(if exact {
        Duration::from_millis(number as u64)
    } else {
        Duration::from_secs_f64(seconds)
    })
}

/// `duration` in the grammar [`parse`] reads, in the largest unit that writes it whole
/// (`90s` is `90s`, `120s` is `2m`, `1500ms` is `1500ms`): whole milliseconds (a part of one is
/// dropped), and at most [`MAX`] (a longer one is written as `MAX`).
pub fn format(duration: Duration) -> String {
    let millis = duration.min(MAX).as_millis();
    if millis == 0 {
        return "0s".to_string();
    }
    if !millis.is_multiple_of(1_000) {
        return format!("{millis}ms");
    }
    let seconds = millis / 1_000;
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if seconds.is_multiple_of(size) {
            return format!("{}{unit}", seconds / size);
        }
    }
    format!("{seconds}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_the_units_people_write() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(parse(" 90m "), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1_500)));
        assert_eq!(parse("0.5ms"), Ok(Duration::from_micros(500)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn what_is_not_a_duration_is_refused_with_why() {
        for (text, why) in [
            ("30", "no unit"),
            ("", "it is empty"),
            ("d", "no number"),
            ("3w", "the unit is not one of ms, s, m, h and d"),
            ("1 s", "the unit is not one of ms, s, m, h and d"),
            ("1.2.3s", "the number is not one"),
            ("-5s", "no number"),
            ("99999999999999999999d", "it is longer than a hundred years"),
            ("36501d", "it is longer than a hundred years"),
        ] {
            let error = parse(text).unwrap_err();
            assert_eq!(error.why, why, "{text}");
            assert!(error.to_string().contains("e.g. 500ms, 30s"), "{error}");
        }
    }

    #[test]
    fn a_written_duration_reads_back_as_itself() {
        for (duration, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(1_500), "1500ms"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(7_200), "2h"),
            (Duration::from_secs(3 * 86_400), "3d"),
        ] {
            assert_eq!(format(duration), text);
            assert_eq!(parse(text), Ok(duration));
        }
        // What no text says is written as the nearest that reads back.
        assert_eq!(format(Duration::from_micros(1_500)), "1ms");
        assert_eq!(format(Duration::MAX), "36500d");
        assert_eq!(parse(&format(Duration::MAX)), Ok(MAX));
    }
}
