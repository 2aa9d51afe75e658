//! The cluster's Kubernetes version against EKS's calendar, at plan time.
//!
//! EKS supports a minor version for 14 months (standard support), then for 12 more at an
//! additional cost per cluster hour (extended support); from the end of extended support it
//! refuses new clusters on it and upgrades the ones left behind ("Understand the Kubernetes
//! version lifecycle on EKS", EKS user guide). A version pinned in a configuration ages
//! through those stages while the configuration stays the same, so `terraform plan` reads the
//! calendar from EKS (DescribeClusterVersions) and says where the version stands today:
//! nothing in standard support, a warning in extended support, an error once EKS no longer
//! offers it. The decision itself is [`judge`], a pure function of the version, the calendar
//! and the time.

use aws_smithy_types::date_time::Format;
use aws_smithy_types::DateTime;

use crate::aws::eks::cluster::KubernetesVersion;
use crate::protocol::prelude::*;

/// Where a version stands on EKS's calendar at a given time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// In standard support.
    Standard,
    /// In extended support: EKS still creates clusters on it, at an additional cost per
    /// cluster hour, until `ends` (seconds since the epoch; `None` when EKS gave no date).
    Extended { ends: Option<i64> },
    /// EKS's extended support ended (on `ended`, when EKS gave the date): new clusters and
    /// upgrades to it are refused.
    Ended { ended: Option<i64> },
    /// Not a version EKS lists at all.
    Unknown,
}

/// The support status of one calendar entry at `now`: from its dates when EKS gave them
/// (so that the answer holds for `now`, not for when the calendar was read), otherwise
/// from the status EKS reported.
fn verdict_of(v: &KubernetesVersion, now: i64) -> Verdict {
    match (v.end_of_standard_support, v.end_of_extended_support) {
        (_, Some(ext)) if now >= ext => Verdict::Ended { ended: Some(ext) },
        (Some(std), ext) if now >= std => Verdict::Extended { ends: ext },
        (Some(_), _) => Verdict::Standard,
        (None, ext) => match v.status.as_deref() {
            Some("EXTENDED_SUPPORT") => Verdict::Extended { ends: ext },
            Some("UNSUPPORTED") => Verdict::Ended { ended: ext },
            _ => Verdict::Standard,
        },
    }
}

/// Where `version` stands on `calendar` at `now` (seconds since the epoch).
pub fn judge(version: &str, calendar: &[KubernetesVersion], now: i64) -> Verdict {
    calendar
        .iter()
        .find(|v| v.version == version)
        .map_or(Verdict::Unknown, |v| verdict_of(v, now))
}

/// `YYYY-MM-DD` of a calendar date (EKS's dates are days in UTC).
fn day(secs: i64) -> String {
    DateTime::from_secs(secs)
        .fmt(Format::DateTime)
        .map(|s| s.chars().take(10).collect())
        .unwrap_or_else(|_| secs.to_string())
}

fn minor_key(v: &str) -> (u32, u32) {
    crate::validators::parse_version(v).unwrap_or_default()
}

/// The versions EKS offers at `now`, newest first, for a message: "1.36 (EKS's default),
/// 1.35 and 1.34 in standard support; 1.33 (until 2027-07-29) and 1.32 (until 2027-03-23)
/// in extended support".
pub fn offered(calendar: &[KubernetesVersion], now: i64) -> String {
    let mut sorted: Vec<&KubernetesVersion> = calendar.iter().collect();
    sorted.sort_by_key(|v| std::cmp::Reverse(minor_key(&v.version)));
    let mut standard = Vec::new();
    let mut extended = Vec::new();
    for v in sorted {
        let default = if v.default { " (EKS's default)" } else { "" };
        match verdict_of(v, now) {
            Verdict::Standard => standard.push(format!("{}{default}", v.version)),
            Verdict::Extended { ends } => extended.push(match ends {
                Some(e) => format!("{}{default} (until {})", v.version, day(e)),
                None => format!("{}{default}", v.version),
            }),
            Verdict::Ended { .. } | Verdict::Unknown => {}
        }
    }
    let list = |items: &[String]| match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    };
    match (standard.is_empty(), extended.is_empty()) {
        (true, true) => "none".to_string(),
        (false, true) => format!("{} in standard support", list(&standard)),
        (true, false) => format!("{} in extended support", list(&extended)),
        (false, false) => format!(
            "{} in standard support; {} in extended support",
            list(&standard),
            list(&extended)
        ),
    }
}

/// What the plan says about `version`, on `calendar` at `now`: `None` in standard support,
/// a warning in extended support, an error when EKS does not offer it. `sent` is whether
/// this plan sends the version to EKS (create, replace or upgrade); when it does not (an
/// existing cluster left alone), a version EKS no longer offers is a warning, since nothing
/// is asked of EKS and EKS upgrades such a cluster itself.
pub fn diagnostic(
    version: &str,
    calendar: &[KubernetesVersion],
    now: i64,
    sent: bool,
) -> Option<Diagnostic> {
    let offered = offered(calendar, now);
    match judge(version, calendar, now) {
        Verdict::Standard => None,
        Verdict::Extended { ends } => {
            let until = ends
                .map(|e| format!(" until {}", day(e)))
                .unwrap_or_default();
            Some(Diagnostic::warning_at(
                "version",
                format!("Kubernetes {version} is in EKS extended support"),
                format!(
                    "version = \"{version}\": EKS's standard support for {version} has ended; it \
                     is in extended support{until}, which EKS bills at an additional cost per \
                     cluster hour. After that EKS refuses new clusters on it and upgrades the \
                     clusters left on it. Versions EKS offers now: {offered}."
                ),
            ))
        }
        Verdict::Ended { ended } => {
            let on = ended.map(|e| format!(" on {}", day(e))).unwrap_or_default();
            let detail = format!(
                "version = \"{version}\": EKS's extended support for {version} ended{on}, and \
                 EKS refuses clusters and upgrades on it. Versions EKS offers now: {offered}. \
                 Pick one of them, or leave version unset to take EKS's default."
            );
            let summary = format!("Kubernetes {version} is no longer supported by EKS");
            Some(if sent {
                Diagnostic::error_at("version", summary, detail)
            } else {
                Diagnostic::warning_at(
                    "version",
                    summary,
                    format!(
                        "{detail} EKS upgrades a cluster left on it by itself, after which \
                         this configuration would ask for a downgrade."
                    ),
                )
            })
        }
        Verdict::Unknown => {
            let summary = format!("EKS does not offer Kubernetes {version}");
            let detail = format!(
                "version = \"{version}\" is not on EKS's version calendar \
                 (DescribeClusterVersions). Versions EKS offers now: {offered}. Leave version \
                 unset to take EKS's default."
            );
            Some(if sent {
                Diagnostic::error_at("version", summary, detail)
            } else {
                Diagnostic::warning_at("version", summary, detail)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Midnight UTC of a day, as EKS dates its calendar.
    fn at(date: &str) -> i64 {
        DateTime::from_str(&format!("{date}T00:00:00Z"), Format::DateTime)
            .unwrap()
            .secs()
    }

    fn entry(version: &str, std: &str, ext: &str, default: bool) -> KubernetesVersion {
        KubernetesVersion {
            version: version.into(),
            default,
            status: None,
            end_of_standard_support: Some(at(std)),
            end_of_extended_support: Some(at(ext)),
        }
    }

    /// A slice of EKS's calendar (kubernetes-versions page).
    fn calendar() -> Vec<KubernetesVersion> {
        vec![
            entry("1.31", "2025-11-26", "2026-11-26", false),
            entry("1.32", "2026-03-23", "2027-03-23", false),
            entry("1.34", "2026-12-02", "2027-12-02", false),
            entry("1.35", "2027-03-27", "2028-03-27", true),
        ]
    }

    #[test]
    fn a_version_moves_from_standard_to_extended_to_ended_with_the_date() {
        let cal = calendar();
        assert_eq!(judge("1.31", &cal, at("2025-11-25")), Verdict::Standard);
        // Extended support starts at the beginning of the day standard support ends.
        assert_eq!(
            judge("1.31", &cal, at("2025-11-26")),
            Verdict::Extended {
                ends: Some(at("2026-11-26"))
            }
        );
        assert_eq!(
            judge("1.31", &cal, at("2026-11-26") - 1),
            Verdict::Extended {
                ends: Some(at("2026-11-26"))
            }
        );
        assert_eq!(
            judge("1.31", &cal, at("2026-11-26")),
            Verdict::Ended {
                ended: Some(at("2026-11-26"))
            }
        );
        assert_eq!(judge("1.99", &cal, at("2026-11-28")), Verdict::Unknown);
    }

    #[test]
    fn without_dates_the_status_eks_reported_decides() {
        let mut v = entry("1.30", "2025-07-23", "2026-07-23", false);
        v.end_of_standard_support = None;
        v.end_of_extended_support = None;
        v.status = Some("UNSUPPORTED".into());
        assert_eq!(
            judge("1.30", std::slice::from_ref(&v), 0),
            Verdict::Ended { ended: None }
        );
        v.status = Some("EXTENDED_SUPPORT".into());
        assert_eq!(
            judge("1.30", std::slice::from_ref(&v), 0),
            Verdict::Extended { ends: None }
        );
        v.status = Some("STANDARD_SUPPORT".into());
        assert_eq!(judge("1.30", &[v], 0), Verdict::Standard);
    }

    #[test]
    fn the_plan_warns_in_extended_support_and_refuses_what_eks_no_longer_offers() {
        let cal = calendar();
        let today = at("2026-11-28");
        assert!(diagnostic("1.35", &cal, today, true).is_none());
        assert!(diagnostic("1.34", &cal, today, true).is_none());

        let w = diagnostic("1.32", &cal, today, true).unwrap();
        assert_eq!(w.severity, Severity::Warning);
        assert_eq!(w.path, Some("version".into()));
        assert!(w.summary.contains("extended support"), "{w:?}");
        assert!(w.detail.contains("until 2027-03-23"), "{w:?}");
        assert!(w.detail.contains("additional cost"), "{w:?}");

        let e = diagnostic("1.31", &cal, today, true).unwrap();
        assert_eq!(e.severity, Severity::Error);
        assert_eq!(e.path, Some("version".into()));
        assert!(e.summary.contains("1.31"), "{e:?}");
        assert!(e.detail.contains("ended on 2026-11-26"), "{e:?}");
        assert!(
            e.detail.contains(
                "1.35 (EKS's default) and 1.34 in standard support; 1.32 (until 2027-03-23) \
                 in extended support"
            ),
            "{e:?}"
        );

        let u = diagnostic("1.99", &cal, today, true).unwrap();
        assert_eq!(u.severity, Severity::Error);
        assert!(u.detail.contains("not on EKS's version calendar"), "{u:?}");

        // An existing cluster left alone: nothing is sent to EKS, so only a warning.
        let kept = diagnostic("1.31", &cal, today, false).unwrap();
        assert_eq!(kept.severity, Severity::Warning);
        assert!(
            kept.detail.contains("upgrades a cluster left on it"),
            "{kept:?}"
        );
    }

    #[test]
    fn the_offer_lists_what_is_supported_newest_first() {
        let cal = calendar();
        assert_eq!(
            offered(&cal, at("2025-12-01")),
            "1.35 (EKS's default), 1.34 and 1.32 in standard support; 1.31 (until 2026-11-26) \
             in extended support"
        );
        assert_eq!(offered(&cal, at("2029-01-01")), "none");
        assert_eq!(offered(&[], 0), "none");
    }
}
