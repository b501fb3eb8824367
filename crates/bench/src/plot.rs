//! PNG charts, drawn with plotters and the bundled DejaVu Sans font (so no fontconfig is
//! needed), written to a temporary name and renamed into place: [`png`], shared with the
//! `graphloom` command's training curves, and the benches' charts (SAR's memory per worker,
//! `bench scale`'s throughput over time).

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// The drawing area of a PNG.
pub type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// Draws a `size` PNG titled `title` with `draw`, then moves it to `path`.
pub fn png(
    path: &Path,
    size: (u32, u32),
    title: &str,
    draw: impl FnOnce(&Area) -> Result<()>,
) -> Result<()> {
    register_font();
    let tmp = path.with_extension("tmp.png");
    {
        let root = BitMapBackend::new(&tmp, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let root = root
            .titled(title, ("sans-serif", 20))
            .map_err(|e| anyhow!("{e}"))?;
        draw(&root)?;
        root.present().map_err(|e| anyhow!("{e}"))?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(())
}

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Registers the bundled font as "sans-serif", once per process.
fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The bundled font is a valid TTF; failure here would be a build defect.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// Draws the legend of a chart's labelled series in a framed box.
fn legend<'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e}"))
}

/// One point of [`sar_memory`]: a run's largest peak of tracked bytes over its workers.
pub(crate) struct WorkerPeak<'a> {
    /// The model.
    pub(crate) model: &'a str,
    /// How halos travelled (sar, sa, osa).
    pub(crate) mode: &'a str,
    /// Workers of the run.
    pub(crate) workers: usize,
    /// The largest peak over the workers.
    pub(crate) peak_bytes: u64,
}

/// Draws peak tracked memory per worker against the worker count, one panel per model, one
/// line per mode, with the single-worker peak divided by N for reference.
pub(crate) fn sar_memory(path: &Path, runs: &[WorkerPeak<'_>]) -> Result<()> {
    let mut models: Vec<&str> = runs.iter().map(|r| r.model).collect();
    models.dedup();
    let modes: [(&str, RGBColor); 3] = [("sar", RED), ("sa", BLUE), ("osa", GREEN)];
    let width = 600 * models.len().max(1) as u32;
    png(
        path,
        (width, 450),
        "SAR: peak tracked memory per worker",
        |root| {
            let panels = root.split_evenly((1, models.len().max(1)));
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            for (area, model) in panels.iter().zip(&models) {
                let mine: Vec<&WorkerPeak> = runs.iter().filter(|r| r.model == *model).collect();
                let max_n = mine.iter().map(|r| r.workers).max().unwrap_or(1) as f64;
                let ymax = mine.iter().map(|r| mib(r.peak_bytes)).fold(1e-9, f64::max) * 1.1;
                let mut chart = ChartBuilder::on(area)
                    .caption(*model, ("sans-serif", 16))
                    .margin(10)
                    .x_label_area_size(35)
                    .y_label_area_size(60)
                    .build_cartesian_2d((1.0..max_n.max(2.0)).log_scale(), 0.0..ymax)
                    .map_err(|e| anyhow!("{e}"))?;
                chart
                    .configure_mesh()
                    .x_desc("workers N")
                    .y_desc("MiB")
                    .draw()
                    .map_err(|e| anyhow!("{e}"))?;
                for (mode, color) in modes {
                    let mut points: Vec<(f64, f64)> = mine
                        .iter()
                        .filter(|r| r.mode == mode)
                        .map(|r| (r.workers as f64, mib(r.peak_bytes)))
                        .collect();
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    if points.is_empty() {
                        continue;
                    }
                    chart
                        .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                        .map_err(|e| anyhow!("{e}"))?
                        .label(mode)
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], color));
                    chart
                        .draw_series(
                            points
                                .into_iter()
                                .map(|p| Circle::new(p, 4, color.filled())),
                        )
                        .map_err(|e| anyhow!("{e}"))?;
                }
                if let Some(single) = mine.iter().find(|r| r.workers == 1) {
                    let base = mib(single.peak_bytes);
                    let mut ns: Vec<f64> = mine.iter().map(|r| r.workers as f64).collect();
                    ns.sort_by(f64::total_cmp);
                    ns.dedup();
                    chart
                        .draw_series(LineSeries::new(
                            ns.into_iter().map(|n| (n, base / n)),
                            BLACK.mix(0.5).stroke_width(1),
                        ))
                        .map_err(|e| anyhow!("{e}"))?
                        .label("N=1 peak / N")
                        .legend(|(x, y)| {
                            PathElement::new(vec![(x, y), (x + 15, y)], BLACK.mix(0.5))
                        });
                }
                legend(&mut chart)?;
            }
            Ok(())
        },
    )
}

/// Draws seeds per second over the seconds of each training run, one line per run.
pub(crate) fn seeds_over_time(path: &Path, runs: &[(&str, Vec<(f64, f64)>)]) -> Result<()> {
    let colors = [RED, BLUE, GREEN, BLACK];
    png(
        path,
        (900, 450),
        "bench scale: training throughput",
        |root| {
            let xmax = runs
                .iter()
                .flat_map(|r| r.1.iter().map(|p| p.0))
                .fold(1.0, f64::max);
            let ymax = runs
                .iter()
                .flat_map(|r| r.1.iter().map(|p| p.1))
                .fold(1.0, f64::max)
                * 1.1;
            let mut chart = ChartBuilder::on(root)
                .margin(10)
                .x_label_area_size(35)
                .y_label_area_size(70)
                .build_cartesian_2d(0.0..xmax, 0.0..ymax)
                .map_err(|e| anyhow!("{e}"))?;
            chart
                .configure_mesh()
                .x_desc("seconds since the run started")
                .y_desc("seeds per second (10 batches)")
                .draw()
                .map_err(|e| anyhow!("{e}"))?;
            for ((name, points), color) in runs.iter().zip(colors) {
                chart
                    .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                    .map_err(|e| anyhow!("{e}"))?
                    .label(*name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], color));
            }
            legend(&mut chart)
        },
    )
}
