//! The timeline picture: pending and running pods above, EC2 nodes stacked by capacity type
//! and zone below, the player's actions (scale-out, storm, review, scale-in) as vertical
//! lines. Plain SVG written by hand: the figure the seed documents show from Grafana,
//! without a plotting crate.

use std::collections::BTreeSet;
use std::fmt::Write;

use crate::recorder::{Marker, Sample};

const W: f64 = 1000.0;
const H: f64 = 620.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 190.0;
const TOP1: f64 = 70.0;
const BOTTOM1: f64 = 250.0;
const TOP2: f64 = 300.0;
const BOTTOM2: f64 = 560.0;

/// Spot in blues, on-demand in oranges, one shade per zone.
fn colour(capacity_type: &str, i: usize) -> &'static str {
    const SPOT: [&str; 4] = ["#1f5fa8", "#4a8fd9", "#8cbcef", "#c3dcf7"];
    const OD: [&str; 4] = ["#c05a00", "#f08a24", "#f7b56e", "#fbd9b1"];
    const OTHER: [&str; 4] = ["#555555", "#888888", "#aaaaaa", "#cccccc"];
    let palette = match capacity_type {
        "spot" => &SPOT,
        "on-demand" => &OD,
        _ => &OTHER,
    };
    palette[i % palette.len()]
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A "nice" axis maximum and tick step for `max`.
fn axis(max: f64) -> (f64, f64) {
    let max = max.max(1.0);
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
        .max(1.0);
    ((max / step).ceil() * step, step)
}

pub fn render(samples: &[Sample], markers: &[Marker], title: &str, note: &str) -> String {
    let mut s = String::new();
    let t_max = samples
        .iter()
        .map(|x| x.t)
        .chain(markers.iter().map(|m| m.t))
        .fold(1.0f64, f64::max);
    let x = |t: f64| LEFT + (W - LEFT - RIGHT) * t / t_max;
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">
<rect width="{W}" height="{H}" fill="white"/>
<text x="{LEFT}" y="24" font-size="16" font-weight="bold">{}</text>
<text x="{LEFT}" y="44" fill="#444">{}</text>
"##,
        esc(title),
        esc(note)
    );

    // Panel 1: pods.
    let pod_max = samples
        .iter()
        .map(|x| x.pending.max(x.running))
        .max()
        .unwrap_or(1) as f64;
    let (pmax, pstep) = axis(pod_max);
    let y1 = |v: f64| BOTTOM1 - (BOTTOM1 - TOP1) * v / pmax;
    grid(&mut s, TOP1, BOTTOM1, pmax, pstep, &y1, "pods");
    for (field, colour, label) in [
        (0usize, "#2a9d3a", "running"),
        (1usize, "#d62728", "pending"),
    ] {
        let pts: Vec<String> = samples
            .iter()
            .map(|p| {
                let v = if field == 0 { p.running } else { p.pending };
                format!("{:.1},{:.1}", x(p.t), y1(v as f64))
            })
            .collect();
        let _ = writeln!(
            s,
            r##"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"##,
            pts.join(" ")
        );
        let ly = TOP1 + 10.0 + 18.0 * field as f64;
        legend(&mut s, ly, colour, label);
    }

    // Panel 2: nodes stacked by (capacity type, zone), Spot at the bottom, zones in order.
    let mut series: Vec<(String, String)> = samples
        .iter()
        .flat_map(|p| p.nodes.keys().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    series.sort_by_key(|(ct, zone)| (ct != "spot", ct.clone(), zone.clone()));
    let node_max = samples.iter().map(Sample::node_count).max().unwrap_or(1) as f64;
    let (nmax, nstep) = axis(node_max);
    let y2 = |v: f64| BOTTOM2 - (BOTTOM2 - TOP2) * v / nmax;
    grid(&mut s, TOP2, BOTTOM2, nmax, nstep, &y2, "EC2 nodes");
    let mut below = vec![0usize; samples.len()];
    let mut zone_index: std::collections::BTreeMap<&str, usize> = Default::default();
    for (k, (ct, zone)) in series.iter().enumerate() {
        let idx = zone_index.entry(ct.as_str()).or_default();
        let c = colour(ct, *idx);
        *idx += 1;
        let above: Vec<usize> = samples
            .iter()
            .zip(&below)
            .map(|(p, b)| {
                b + p
                    .nodes
                    .get(&(ct.clone(), zone.clone()))
                    .copied()
                    .unwrap_or(0)
            })
            .collect();
        let mut pts: Vec<String> = samples
            .iter()
            .zip(&above)
            .map(|(p, v)| format!("{:.1},{:.1}", x(p.t), y2(*v as f64)))
            .collect();
        pts.extend(
            samples
                .iter()
                .zip(&below)
                .rev()
                .map(|(p, v)| format!("{:.1},{:.1}", x(p.t), y2(*v as f64))),
        );
        let _ = writeln!(
            s,
            r##"<polygon fill="{c}" stroke="none" points="{}"/>"##,
            pts.join(" ")
        );
        // The legend reads top-down as the stack does: the last series drawn is on top.
        legend(
            &mut s,
            TOP2 + 10.0 + 18.0 * (series.len() - 1 - k) as f64,
            c,
            &format!("{ct} {zone}"),
        );
        below = above;
    }

    // Time axis and markers.
    let (tmax_nice, tstep) = axis(t_max);
    let mut t = 0.0;
    while t <= tmax_nice.min(t_max) + 1e-9 {
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{}" text-anchor="middle" fill="#444">{t:.0}s</text>"##,
            x(t),
            BOTTOM2 + 18.0
        );
        t += tstep;
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{}" text-anchor="middle">seconds since the sandbox started</text>"##,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        BOTTOM2 + 40.0
    );
    for m in markers {
        let mx = x(m.t);
        let _ = writeln!(
            s,
            r##"<line x1="{mx:.1}" y1="{TOP1}" x2="{mx:.1}" y2="{BOTTOM2}" stroke="#000" stroke-dasharray="4 3" stroke-width="1"/>"##
        );
    }
    // Labels after every line, on a white ground: a label may cross a later marker's line.
    for (m, (lx, ly, anchor_end)) in markers.iter().zip(label_places(markers, &x)) {
        let w = label_width(&m.label);
        let rx = if anchor_end { lx - w } else { lx };
        let _ = writeln!(
            s,
            r##"<rect x="{rx:.1}" y="{:.1}" width="{w:.1}" height="13" fill="white" fill-opacity="0.85"/>
<text x="{lx:.1}" y="{ly:.1}" font-size="11" fill="#000"{}>{}</text>"##,
            ly - 10.0,
            if anchor_end {
                r#" text-anchor="end""#
            } else {
                ""
            },
            esc(&m.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Rows a marker label may take: just above the pods panel, then in the gap between the
/// panels, lowest first.
const LABEL_ROWS: [f64; 4] = [TOP1 - 6.0, TOP2 - 6.0, TOP2 - 20.0, TOP2 - 34.0];

/// Width of a label at 11 px sans-serif: about 6.2 px a character, a little margin. An
/// estimate (there is no font metrics here), generous so that neighbours do not touch.
fn label_width(label: &str) -> f64 {
    label.chars().count() as f64 * 6.2 + 6.0
}

/// Where each marker's label goes: `(x, baseline y, anchored at its end)`. Markers seconds
/// apart (the storm, the review plan and the scale-in come within a few seconds of each
/// other) would print over each other on one line, so each label takes the first row
/// where it overlaps no label already placed; a label that would run past the plot's right
/// edge ends at its line instead of starting there. When every row is taken, the row whose
/// last label ends first is reused (a readable overlap beats a lost label).
fn label_places(markers: &[Marker], x: &dyn Fn(f64) -> f64) -> Vec<(f64, f64, bool)> {
    let mut row_end = [f64::NEG_INFINITY; LABEL_ROWS.len()];
    let mut order: Vec<usize> = (0..markers.len()).collect();
    order.sort_by(|a, b| markers[*a].t.total_cmp(&markers[*b].t));
    let mut out = vec![(0.0, 0.0, false); markers.len()];
    for i in order {
        let mx = x(markers[i].t);
        let w = label_width(&markers[i].label);
        let anchor_end = mx + 3.0 + w > W - RIGHT;
        let (start, end) = if anchor_end {
            (mx - 3.0 - w, mx - 3.0)
        } else {
            (mx + 3.0, mx + 3.0 + w)
        };
        let row = (0..LABEL_ROWS.len())
            .find(|r| row_end[*r] <= start)
            .unwrap_or_else(|| {
                (0..LABEL_ROWS.len())
                    .min_by(|a, b| row_end[*a].total_cmp(&row_end[*b]))
                    .unwrap_or(0)
            });
        row_end[row] = end;
        let lx = if anchor_end { mx - 3.0 } else { mx + 3.0 };
        out[i] = (lx, LABEL_ROWS[row], anchor_end);
    }
    out
}

fn grid(
    s: &mut String,
    top: f64,
    bottom: f64,
    max: f64,
    step: f64,
    y: &dyn Fn(f64) -> f64,
    label: &str,
) {
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{top}" width="{}" height="{}" fill="none" stroke="#999"/>"##,
        W - LEFT - RIGHT,
        bottom - top
    );
    let mut v = 0.0;
    while v <= max + 1e-9 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="#eee"/>
<text x="{}" y="{:.1}" text-anchor="end" fill="#444">{v:.0}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            yy + 4.0
        );
        v += step;
    }
    let _ = writeln!(
        s,
        r##"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{label}</text>"##,
        (top + bottom) / 2.0,
        (top + bottom) / 2.0
    );
}

fn legend(s: &mut String, y: f64, colour: &str, label: &str) {
    let lx = W - RIGHT + 14.0;
    let _ = writeln!(
        s,
        r##"<rect x="{lx}" y="{:.1}" width="12" height="12" fill="{colour}"/><text x="{}" y="{:.1}">{}</text>"##,
        y - 10.0,
        lx + 18.0,
        y,
        esc(label)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_picks_round_steps() {
        assert_eq!(axis(100.0), (100.0, 20.0));
        assert_eq!(axis(23.0), (25.0, 5.0));
        assert_eq!(axis(0.0), (1.0, 1.0));
    }

    #[test]
    fn renders_series_markers_and_escapes_text() {
        let mut nodes = std::collections::BTreeMap::new();
        nodes.insert(("spot".to_string(), "us-east-1a".to_string()), 3);
        nodes.insert(("on-demand".to_string(), "us-east-1b".to_string()), 1);
        let samples = vec![
            Sample {
                t: 0.0,
                pending: 10,
                running: 0,
                nodes: Default::default(),
                dollars_per_hour: 0.0,
            },
            Sample {
                t: 5.0,
                pending: 0,
                running: 10,
                nodes,
                dollars_per_hour: 0.3,
            },
        ];
        let markers = vec![Marker {
            t: 1.0,
            label: "storm <30%>".into(),
        }];
        let svg = render(&samples, &markers, "t", "boot delay 2 s");
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("storm &lt;30%&gt;"));
        assert!(svg.contains("spot us-east-1a"));
        assert!(svg.contains("on-demand us-east-1b"));
        assert!(svg.contains("boot delay 2 s"));
        assert_eq!(svg.matches("<polygon").count(), 2);
    }

    #[test]
    fn close_markers_get_separate_rows_and_labels_stay_inside_the_plot() {
        let x = |t: f64| LEFT + (W - LEFT - RIGHT) * t / 100.0;
        let m = |t: f64, label: &str| Marker {
            t,
            label: label.into(),
        };
        let markers = [
            m(10.0, "apply"),
            m(40.0, "storm: 6 Spot warnings"),
            m(45.0, "plan review"),
            m(47.0, "scale to 4"),
            m(99.0, "destroy"),
        ];
        let places = label_places(&markers, &x);
        // The three markers within 7 s of each other: three different rows.
        let rows: BTreeSet<u64> = places[1..4].iter().map(|p| p.1 as u64).collect();
        assert_eq!(rows.len(), 3, "{places:?}");
        // No two labels in one row overlap.
        for (i, a) in places.iter().enumerate() {
            for (j, b) in places.iter().enumerate().skip(i + 1) {
                if a.1 != b.1 {
                    continue;
                }
                let span = |p: &(f64, f64, bool), label: &str| {
                    let w = label_width(label);
                    if p.2 {
                        (p.0 - w, p.0)
                    } else {
                        (p.0, p.0 + w)
                    }
                };
                let (a0, a1) = span(a, &markers[i].label);
                let (b0, b1) = span(b, &markers[j].label);
                assert!(a1 <= b0 || b1 <= a0, "{i} and {j} overlap: {places:?}");
            }
        }
        // The last marker sits at the right edge: its label ends at its line.
        assert!(places[4].2);
        assert!(places[4].0 <= W - RIGHT);
    }

    #[test]
    fn legend_lists_the_stack_top_down() {
        let mut nodes = std::collections::BTreeMap::new();
        for (ct, zone) in [
            ("spot", "us-east-1a"),
            ("spot", "us-east-1b"),
            ("on-demand", "us-east-1a"),
        ] {
            nodes.insert((ct.to_string(), zone.to_string()), 1);
        }
        let samples = vec![Sample {
            t: 1.0,
            pending: 0,
            running: 3,
            nodes,
            dollars_per_hour: 0.0,
        }];
        let svg = render(&samples, &[], "t", "n");
        let at = |label: &str| svg.find(&format!(">{label}</text>")).unwrap();
        // Drawn bottom-up: spot a, spot b, on-demand a ...
        let polys: Vec<usize> = svg.match_indices("<polygon").map(|(i, _)| i).collect();
        assert_eq!(polys.len(), 3);
        assert!(polys[0] < at("spot us-east-1a") && at("spot us-east-1a") < polys[1]);
        // ... and the legend's rows, by their y, top-down: on-demand a, spot b, spot a.
        let y_of = |label: &str| {
            let i = at(label);
            let text = &svg[svg[..i].rfind("<text").unwrap()..i];
            let y = text
                .split("y=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            y.parse::<f64>().unwrap()
        };
        assert!(y_of("on-demand us-east-1a") < y_of("spot us-east-1b"));
        assert!(y_of("spot us-east-1b") < y_of("spot us-east-1a"));
    }
}
