//! The latency chart: how many turns took how long, on log scales so the
//! tail is as visible as the bulk. Drawn with plotters into a PNG; text uses
//! the embedded DejaVu Sans, so it renders without any system font.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, anyhow};
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::stats::Summary;

/// One distribution to draw.
pub struct Series<'a> {
    pub name: &'a str,
    pub samples: &'a [Duration],
    pub color: RGBColor,
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing the chart: {e}")
}

/// Log-spaced buckets between `lo` and `hi` (µs): (bucket centre, count).
fn histogram(samples: &[Duration], lo: f64, hi: f64, buckets: usize) -> Vec<(f64, f64)> {
    let (llo, lhi) = (lo.ln(), hi.ln());
    let width = (lhi - llo) / buckets as f64;
    let mut counts = vec![0u64; buckets];
    for s in samples {
        let us = (s.as_secs_f64() * 1e6).max(lo);
        let i = (((us.ln() - llo) / width) as usize).min(buckets - 1);
        counts[i] += 1;
    }
    counts
        .into_iter()
        .enumerate()
        .filter(|(_, c)| *c > 0)
        .map(|(i, c)| ((llo + (i as f64 + 0.5) * width).exp(), c as f64))
        .collect()
}

pub fn latency_png(path: &Path, title: &str, series: &[Series<'_>]) -> Result<()> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| anyhow!("the embedded font did not load"))?;
    let all_us = || {
        series
            .iter()
            .flat_map(|s| s.samples.iter().map(|d| d.as_secs_f64() * 1e6))
    };
    let lo = all_us().fold(f64::INFINITY, f64::min).max(1.0) * 0.9;
    let hi = all_us().fold(0.0, f64::max).max(lo * 2.0) * 1.1;
    let hists: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| histogram(s.samples, lo, hi, 80))
        .collect();
    let top = hists.iter().flatten().map(|(_, c)| *c).fold(1.0, f64::max) * 2.0;

    let root = BitMapBackend::new(path, (1100, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d((lo..hi).log_scale(), (0.8f64..top).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("ServerMessage sent -> first update received (microseconds, log scale)")
        .y_desc("turns per bucket (log scale)")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(err)?;
    for (s, points) in series.iter().zip(hists) {
        let sum = Summary::of(s.samples);
        let label = format!(
            "{}: n={} p50={:.0}us p99={:.0}us max={:.0}us",
            s.name, sum.n, sum.p50_us, sum.p99_us, sum.max_us
        );
        let color = s.color;
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
