//! Cron schedules for disruption budgets and scheduled headroom, in UTC, as Karpenter reads them: five fields
//! (minute hour day-of-month month day-of-week) with `*`, `?`, lists, ranges, steps and
//! month/day names, or a macro (`@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`,
//! `@midnight`, `@hourly`). When both day fields are restricted, a day matches if either
//! does (the classic cron rule, which Karpenter's parser follows).
//!
//! Written here rather than taken from a crate because the agent needs only "was there a
//! hit in the last `duration`", with time passed in, so the decision stays pure.

/// A parsed schedule: one bit per allowed value of each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    minutes: u64,
    hours: u32,
    dom: u32,
    months: u16,
    dow: u8,
    dom_star: bool,
    dow_star: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Schedule {
    pub fn parse(s: &str) -> Result<Schedule, String> {
        let expanded = match s.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(format!("schedule {s:?}: unknown macro {other:?}"))
            }
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "schedule {s:?}: expected 5 fields (minute hour day-of-month month day-of-week), got {}",
                fields.len()
            ));
        }
        let f = |i: usize, name: &str, lo: u32, hi: u32, names: &[&str], first: u32| {
            field(fields[i], lo, hi, names, first)
                .map_err(|e| format!("schedule {s:?}: {name}: {e}"))
        };
        let minutes = f(0, "minute", 0, 59, &[], 0)?;
        let hours = f(1, "hour", 0, 23, &[], 0)?;
        let dom = f(2, "day of month", 1, 31, &[], 0)?;
        let months = f(3, "month", 1, 12, &MONTHS, 1)?;
        let mut dow = f(4, "day of week", 0, 7, &DAYS, 0)?;
        // 7 is Sunday too.
        if dow & (1 << 7) != 0 {
            dow |= 1;
        }
        let star = |t: &str| t.starts_with('*') || t.starts_with('?');
        Ok(Schedule {
            minutes,
            hours: hours as u32,
            dom: dom as u32,
            months: months as u16,
            dow: (dow & 0x7f) as u8,
            dom_star: star(fields[2]),
            dow_star: star(fields[4]),
        })
    }

    /// Whether the schedule fires at this minute (seconds since the epoch, UTC).
    pub fn matches(&self, t: i64) -> bool {
        let c = Civil::from_unix(t);
        self.day_matches(&c)
            && self.hours & (1 << c.hour) != 0
            && self.minutes & (1 << c.minute) != 0
    }

    fn day_matches(&self, c: &Civil) -> bool {
        if self.months & (1 << c.month) == 0 {
            return false;
        }
        let dom = self.dom & (1 << c.day) != 0;
        let dow = self.dow & (1 << c.weekday) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// Whether a window of `duration` seconds opened by this schedule contains `now`: a hit
    /// at some minute `m` with `now - duration < m <= now`.
    pub fn active(&self, now: i64, duration: u64) -> bool {
        if duration == 0 {
            return false;
        }
        // The Gregorian calendar, weekdays included, repeats every 400 years (146,097 days,
        // a whole number of weeks): a longer window holds no hit a 400-year one does not.
        // Without the cap a budget whose `duration` is absurdly long and whose schedule
        // (almost) never fires, `0 0 31 2 *`, walked one day at a time through billions of
        // days, and a duration beyond i64::MAX seconds overflowed.
        const CYCLE: u64 = 146_097 * 86_400;
        let duration = duration.min(CYCLE) as i64;
        let mut t = floor_minute(now.saturating_sub(duration)) + 60;
        // Skip whole days and hours that cannot match, so long windows stay cheap.
        while t <= now {
            let c = Civil::from_unix(t);
            if !self.day_matches(&c) {
                t = t - t.rem_euclid(86_400) + 86_400;
                continue;
            }
            if self.hours & (1 << c.hour) == 0 {
                t = t - t.rem_euclid(3_600) + 3_600;
                continue;
            }
            if self.minutes & (1 << c.minute) != 0 {
                return true;
            }
            t += 60;
        }
        false
    }
}

fn floor_minute(t: i64) -> i64 {
    t - t.rem_euclid(60)
}

/// Parses one field into a bit set over `lo..=hi`; `names[i]` stands for `first + i`.
fn field(s: &str, lo: u32, hi: u32, names: &[&str], first: u32) -> Result<u64, String> {
    let value = |v: &str| -> Result<u32, String> {
        let lower = v.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            return Ok(i as u32 + first);
        }
        let n: u32 = v.parse().map_err(|_| format!("{v:?} is not a number"))?;
        if n < lo || n > hi {
            return Err(format!("{n} is outside {lo}-{hi}"));
        }
        Ok(n)
    };
    let mut bits = 0u64;
    for part in s.split(',') {
        if part.is_empty() {
            return Err(format!("empty list item in {s:?}"));
        }
        let (range, step) = match part.split_once('/') {
            Some((r, st)) => {
                let st: u32 = st
                    .parse()
                    .map_err(|_| format!("step {st:?} is not a number"))?;
                if st == 0 {
                    return Err("step must be positive".into());
                }
                (r, st)
            }
            None => (part, 1),
        };
        let (a, b) = if range == "*" || range == "?" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(a)?, value(b)?);
            if a > b {
                return Err(format!("range {range:?} runs backwards"));
            }
            (a, b)
        } else {
            let a = value(range)?;
            // `5/15` means 5, 20, 35, 50.
            (a, if step > 1 { hi } else { a })
        };
        let mut v = a;
        while v <= b {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(bits)
}

/// A UTC calendar time (Howard Hinnant's days-from-civil algorithm, inverted).
struct Civil {
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    /// 0 = Sunday.
    weekday: u32,
}

impl Civil {
    fn from_unix(t: i64) -> Civil {
        let days = t.div_euclid(86_400);
        let secs = t.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
        Civil {
            month,
            day,
            hour: (secs / 3_600) as u32,
            minute: ((secs % 3_600) / 60) as u32,
            // 1970-01-01 was a Thursday.
            weekday: (days + 4).rem_euclid(7) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-11-23 is a Monday.
    const MON_0000: i64 = 1_795_392_000;

    #[test]
    fn civil_dates() {
        let c = Civil::from_unix(MON_0000);
        assert_eq!(
            (c.month, c.day, c.hour, c.minute, c.weekday),
            (11, 23, 0, 0, 1)
        );
        let c = Civil::from_unix(0);
        assert_eq!((c.month, c.day, c.weekday), (1, 1, 4));
        // 2024-02-29 12:34 UTC (a Thursday): leap day.
        let c = Civil::from_unix(1_709_210_040);
        assert_eq!(
            (c.month, c.day, c.hour, c.minute, c.weekday),
            (2, 29, 12, 34, 4)
        );
    }

    #[test]
    fn business_hours_window() {
        let s = Schedule::parse("0 9 * * mon-fri").unwrap();
        let h = 3_600;
        assert!(s.matches(MON_0000 + 9 * h));
        assert!(!s.matches(MON_0000 + 9 * h + 60));
        assert!(!s.active(MON_0000 + 8 * h + 59 * 60, 8 * 3600));
        assert!(s.active(MON_0000 + 9 * h, 8 * 3600));
        assert!(s.active(MON_0000 + 16 * h + 59 * 60, 8 * 3600));
        assert!(
            !s.active(MON_0000 + 17 * h, 8 * 3600),
            "window is half-open"
        );
        // Saturday 2026-11-28 10:00: no hit.
        assert!(!s.active(MON_0000 + 5 * 86_400 + 10 * h, 8 * 3600));
        // Sunday name and 7 both mean Sunday.
        let sun = Schedule::parse("0 0 * * 7").unwrap();
        assert_eq!(sun, Schedule::parse("0 0 * * SUN").unwrap());
        assert!(sun.matches(MON_0000 - 86_400));
    }

    #[test]
    fn fields_macros_and_errors() {
        let s = Schedule::parse("*/15 * * * *").unwrap();
        assert!(s.matches(MON_0000 + 45 * 60));
        assert!(!s.matches(MON_0000 + 46 * 60));
        let s = Schedule::parse("5/20 1,3 * jan-mar,nov *").unwrap();
        assert!(s.matches(MON_0000 + 3 * 3600 + 25 * 60));
        assert!(!s.matches(MON_0000 + 2 * 3600 + 25 * 60));
        assert_eq!(
            Schedule::parse("@daily").unwrap(),
            Schedule::parse("0 0 * * *").unwrap()
        );
        // dom and dow both restricted: either matches (the 1st, or any Monday).
        let s = Schedule::parse("0 0 1 * mon").unwrap();
        assert!(s.matches(MON_0000));
        assert!(s.matches(MON_0000 + 8 * 86_400)); // 2026-12-01, a Tuesday
        assert!(!s.matches(MON_0000 + 86_400));
        for bad in [
            "",
            "* * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "*/0 * * * *",
            "5-1 * * * *",
            "@fortnightly",
            "a * * * *",
            "1,,2 * * * *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad:?} should fail");
        }
        assert!(Schedule::parse("61 * * * *")
            .unwrap_err()
            .contains("minute"));
    }

    #[test]
    fn long_windows_and_zero_duration() {
        let s = Schedule::parse("@monthly").unwrap();
        // 2026-11-01 00:00 is 22 days before MON_0000.
        assert!(s.active(MON_0000, 23 * 86_400));
        assert!(!s.active(MON_0000, 22 * 86_400));
        assert!(!s.active(MON_0000, 0));
    }

    /// Found writing the fuzz target `fuzz/fuzz_targets/agent_parsers.rs`: a schedule that
    /// never fires with a duration of millions of years hung the disruption pass, and a
    /// duration past i64::MAX seconds overflowed.
    #[test]
    fn absurd_durations_end_and_do_not_overflow() {
        let never = Schedule::parse("0 0 31 2 *").unwrap();
        assert!(!never.active(MON_0000, 3_600 * 99_999_999_999_999));
        assert!(!never.active(MON_0000, u64::MAX));
        let leap = Schedule::parse("0 0 29 2 *").unwrap();
        assert!(leap.active(MON_0000, u64::MAX));
        assert!(Schedule::parse("@daily")
            .unwrap()
            .active(0, 9_300_000_000_000_000_000));
    }
}
