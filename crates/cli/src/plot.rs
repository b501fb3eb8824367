//! The training curves of `graphloom train --plot`, drawn with the PNG helpers the benches'
//! charts use too (`graphloom_bench::plot`).

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use graphloom_nn::train::EpochRecord;

use graphloom_bench::plot::{png, Area};

/// One line of a panel: its legend label, its values per epoch and its colour.
type Line<'a> = (&'a str, Vec<(f64, f64)>, RGBColor);

/// Epochs to mark on the training curves.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Marks {
    /// The epoch of the best validation accuracy (the saved model's).
    pub(crate) best_epoch: Option<usize>,
    /// The last epoch, when patience ran out before the epochs did.
    pub(crate) early_stop: Option<usize>,
}

/// The colour of the best epoch's mark, used by nothing else.
const BEST: RGBColor = RGBColor(255, 140, 0);
/// Link metrics' colours beside the accuracies' blue and green.
const OLIVE: RGBColor = RGBColor(128, 128, 0);
const TEAL: RGBColor = RGBColor(0, 150, 150);
const BROWN: RGBColor = RGBColor(140, 70, 20);

/// The colour of the early stop's mark, used by nothing else.
const STOP: RGBColor = RGBColor(148, 0, 211);
/// Pixels under each panel for its legend, so that no legend covers a curve.
const LEGEND_STRIP: u32 = 64;
/// The size of tick labels and legends.
const LABEL_FONT: u32 = 14;

/// Draws loss, accuracies (a link predictor's validation metrics: every one, so that a
/// collapse of one while the selecting metric rises is in view) and peak memory per epoch
/// into three panels of a 1200 x 480 PNG, with the best epoch and an early stop marked by
/// vertical lines on each, and each panel's legend below it.
pub(crate) fn training_curves(
    path: &Path,
    title: &str,
    epochs: &[EpochRecord],
    marks: Marks,
) -> Result<()> {
    png(path, (1200, 480), title, |root| {
        let panels = root.split_evenly((1, 3));
        let xs: Vec<i64> = epochs.iter().map(|e| e.epoch as i64).collect();
        let first = xs.first().copied().unwrap_or(1);
        let last = xs.last().copied().unwrap_or(1).max(first + 1);
        let max_loss = epochs.iter().map(|e| e.loss).fold(0.0, f64::max).max(1e-9) * 1.05;
        let mib: Vec<f64> = epochs
            .iter()
            .map(|e| e.peak_bytes as f64 / (1 << 20) as f64)
            .collect();
        let max_mib = mib.iter().cloned().fold(0.0, f64::max).max(1e-9) * 1.1;
        let series: [(&str, f64, Vec<Line>); 3] = [
            (
                "training loss",
                max_loss,
                vec![(
                    "loss",
                    xs.iter()
                        .map(|&x| x as f64)
                        .zip(epochs.iter().map(|e| e.loss))
                        .collect(),
                    RED,
                )],
            ),
            scores(epochs),
            (
                "peak tracked memory (MiB)",
                max_mib,
                vec![(
                    "peak",
                    xs.iter().map(|&x| x as f64).zip(mib).collect(),
                    MAGENTA,
                )],
            ),
        ];
        let mut marked: Vec<(String, i64, RGBColor)> = Vec::new();
        if let Some(b) = marks.best_epoch {
            marked.push((format!("best epoch {b}"), b as i64, BEST));
        }
        if let Some(s) = marks.early_stop {
            marked.push((format!("early stop after epoch {s}"), s as i64, STOP));
        }
        for (area, (caption, ymax, lines)) in panels.iter().zip(series) {
            let (height, width) = (area.dim_in_pixel().1, area.dim_in_pixel().0);
            let (plot, strip) = area.split_vertically(height.saturating_sub(LEGEND_STRIP));
            let mut chart = ChartBuilder::on(&plot)
                .caption(caption, ("sans-serif", 16))
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(56)
                // One epoch of room on the right: a mark on the last epoch stays in view.
                .build_cartesian_2d(first..last + 1, 0.0..ymax)
                .map_err(|e| anyhow!("{e}"))?;
            let y_format = tick_format(ymax);
            chart
                .configure_mesh()
                .x_desc("epoch")
                .x_labels(((last - first + 1) as usize).min(8))
                .y_labels(6)
                .y_label_formatter(&y_format)
                .label_style(("sans-serif", LABEL_FONT))
                .light_line_style(WHITE.mix(0.0))
                .draw()
                .map_err(|e| anyhow!("{e}"))?;
            let mut entries: Vec<(String, RGBColor, u32)> = Vec::new();
            for (label, ys, color) in lines {
                let points: Vec<(i64, f64)> = ys.into_iter().map(|(x, y)| (x as i64, y)).collect();
                chart
                    .draw_series(LineSeries::new(points, color.stroke_width(2)))
                    .map_err(|e| anyhow!("{e}"))?;
                entries.push((label.to_string(), color, 2));
            }
            for (label, x, color) in &marked {
                chart
                    .draw_series(LineSeries::new(
                        [(*x, 0.0), (*x, ymax)],
                        color.stroke_width(2),
                    ))
                    .map_err(|e| anyhow!("{e}"))?;
                entries.push((label.clone(), *color, 2));
            }
            legend_strip(&strip, width, &entries)?;
        }
        Ok(())
    })
}

/// The middle panel: the figures the first evaluation names for its curves
/// ([`Evaluation::curves`]: the accuracies of a node classifier, a link predictor's validation
/// metrics), each over the epochs that evaluated it.
fn scores(epochs: &[EpochRecord]) -> (&'static str, f64, Vec<Line<'static>>) {
    let Some(first) = epochs.iter().find_map(|e| e.evaluation) else {
        return ("accuracy", 1.0, Vec::new());
    };
    let (title, figures) = first.curves();
    let lines = figures
        .iter()
        .map(|&(name, _)| {
            let points = epochs
                .iter()
                .filter_map(|e| {
                    let (_, figures) = e.evaluation?.curves();
                    let &(_, y) = figures.iter().find(|(n, _)| *n == name)?;
                    Some((e.epoch as f64, y))
                })
                .collect();
            (name, points, colour(name))
        })
        .collect();
    (title, 1.0, lines)
}

/// The colour of a curve, by its name: the splits' accuracies blue, green and black; the
/// validation AUC blue, Hits@20/50/100 olive, green and teal, MRR brown.
fn colour(name: &str) -> RGBColor {
    match name {
        "train" | "val auc" => BLUE,
        "valid" | "val hits@50" => GREEN,
        "val hits@20" => OLIVE,
        "val hits@100" => TEAL,
        "val mrr" => BROWN,
        _ => BLACK,
    }
}

/// Tick labels for an axis from 0 to `max` in about five steps: as many decimals as a step
/// needs, and no more.
fn tick_format(max: f64) -> impl Fn(&f64) -> String {
    let step = (max / 5.0).max(1e-9);
    let decimals = (-step.log10()).ceil().clamp(0.0, 4.0) as usize;
    move |v| format!("{v:.decimals$}")
}

/// Draws legend entries (a line of the colour, then the label) in rows across a strip.
fn legend_strip(strip: &Area, width: u32, entries: &[(String, RGBColor, u32)]) -> Result<()> {
    let font = TextStyle::from(("sans-serif", LABEL_FONT).into_font());
    let (mut x, mut y) = (60i32, 8i32);
    for (label, color, stroke) in entries {
        let (w, _) = strip
            .estimate_text_size(label, &font)
            .map_err(|e| anyhow!("{e}"))?;
        let entry = 24 + w as i32 + 18;
        if x + entry > width as i32 && x > 60 {
            (x, y) = (60, y + 22);
        }
        strip
            .draw(&PathElement::new(
                vec![(x, y + 8), (x + 18, y + 8)],
                color.stroke_width(*stroke + 1),
            ))
            .map_err(|e| anyhow!("{e}"))?;
        strip
            .draw(&Text::new(label.clone(), (x + 24, y), font.clone()))
            .map_err(|e| anyhow!("{e}"))?;
        x += entry;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use graphloom_nn::link::metrics::LinkMetrics;
    use graphloom_nn::train::{Accuracy, Evaluation};

    fn records(n: usize) -> Vec<EpochRecord> {
        (1..=n)
            .map(|epoch| EpochRecord {
                epoch,
                loss: 2.0 / epoch as f64,
                evaluation: Some(Evaluation::Node(Accuracy {
                    train: 0.5 + 0.04 * epoch as f64,
                    val: 0.4 + 0.03 * epoch as f64,
                    test: 0.4 + 0.02 * epoch as f64,
                })),
                seconds: 0.1,
                peak_bytes: 3 << 20,
            })
            .collect()
    }

    /// The RGB pixels of a PNG and its width.
    fn pixels(path: &Path) -> (Vec<[u8; 3]>, usize) {
        let decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let channels = info.color_type.samples();
        let px = buf[..info.buffer_size()]
            .chunks(channels)
            .map(|c| [c[0], c[1], c[2]])
            .collect();
        (px, info.width as usize)
    }

    #[test]
    fn the_best_epoch_and_an_early_stop_are_marked_and_legends_sit_below_the_curves() {
        let dir = std::env::temp_dir().join(format!("graphloom-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (plain, marked) = (dir.join("plain.png"), dir.join("marked.png"));
        let epochs = records(9);
        training_curves(&plain, "t", &epochs, Marks::default()).unwrap();
        let marks = Marks {
            best_epoch: Some(6),
            early_stop: Some(9),
        };
        training_curves(&marked, "t", &epochs, marks).unwrap();
        let count = |path: &Path, c: RGBColor| {
            pixels(path)
                .0
                .iter()
                .filter(|p| **p == [c.0, c.1, c.2])
                .count()
        };
        assert_eq!(count(&plain, BEST) + count(&plain, STOP), 0);
        assert!(
            count(&marked, BEST) > 300,
            "the best epoch is marked on every panel"
        );
        assert!(
            count(&marked, STOP) > 300,
            "the early stop is marked on every panel"
        );
        // Every legend is in the strip under its panel: the curves' colours above it are the
        // curves', and the strip holds the legend's samples.
        let (px, width) = pixels(&marked);
        let height = px.len() / width;
        let strip_top = height - LEGEND_STRIP as usize;
        let in_strip = |c: RGBColor| {
            px[strip_top * width..]
                .iter()
                .filter(|p| **p == [c.0, c.1, c.2])
                .count()
        };
        for c in [RED, BLUE, GREEN, MAGENTA, BEST, STOP] {
            assert!(in_strip(c) > 0, "a legend sample of {c:?} under the panels");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_predictor_has_every_validation_metric_drawn() {
        use graphloom_nn::link::metrics::{LinkEvaluation, LinkMetric};
        let dir = std::env::temp_dir().join(format!("graphloom-plot-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("link.png");
        let metrics = |t: f64| LinkMetrics {
            auc: 0.9 - 0.04 * t,
            hits: [0.2 + 0.01 * t, 0.3 - 0.02 * t, 0.4 + 0.02 * t],
            mrr: Some(0.1 + 0.05 * t),
        };
        let epochs: Vec<EpochRecord> = (1..=9)
            .map(|epoch| EpochRecord {
                epoch,
                loss: 1.0 / epoch as f64,
                evaluation: Some(Evaluation::Link(LinkEvaluation {
                    valid: metrics(epoch as f64),
                    test: metrics(epoch as f64),
                    metric: LinkMetric::Mrr,
                })),
                seconds: 0.1,
                peak_bytes: 3 << 20,
            })
            .collect();
        training_curves(&path, "t", &epochs, Marks::default()).unwrap();
        let (px, width) = pixels(&path);
        let strip_top = px.len() / width - LEGEND_STRIP as usize;
        // Each metric's colour is on a curve above the legends, not only in a legend sample.
        for c in [BLUE, OLIVE, GREEN, TEAL, BROWN] {
            let above = px[..strip_top * width]
                .iter()
                .filter(|p| **p == [c.0, c.1, c.2])
                .count();
            assert!(above > 100, "a curve of {c:?}: {above} pixels");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
