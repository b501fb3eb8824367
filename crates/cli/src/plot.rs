//! PNG charts of training curves, drawn with plotters and the bundled DejaVu Sans font.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use graphloom_nn::train::EpochRecord;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// One line of a panel: its legend label, its values per epoch and its colour.
type Line<'a> = (&'a str, Vec<f64>, RGBColor);

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The bundled font is a valid TTF; failure here would be a build defect.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// Draws loss, accuracies and peak memory per epoch into a 1200 x 400 PNG with three panels.
pub(crate) fn training_curves(path: &Path, title: &str, epochs: &[EpochRecord]) -> Result<()> {
    register_font();
    let tmp = path.with_extension("tmp.png");
    {
        let root = BitMapBackend::new(&tmp, (1200, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let root = root
            .titled(title, ("sans-serif", 20))
            .map_err(|e| anyhow!("{e}"))?;
        let panels = root.split_evenly((1, 3));
        let n = epochs.len().max(2) as f64;
        let xs: Vec<f64> = epochs.iter().map(|e| e.epoch as f64).collect();
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
                vec![("loss", epochs.iter().map(|e| e.loss).collect(), RED)],
            ),
            (
                "accuracy",
                1.0,
                vec![
                    ("train", epochs.iter().map(|e| e.train_acc).collect(), BLUE),
                    ("valid", epochs.iter().map(|e| e.val_acc).collect(), GREEN),
                    ("test", epochs.iter().map(|e| e.test_acc).collect(), BLACK),
                ],
            ),
            (
                "peak tracked memory (MiB)",
                max_mib,
                vec![("peak", mib, MAGENTA)],
            ),
        ];
        for (area, (caption, ymax, lines)) in panels.iter().zip(series) {
            let mut chart = ChartBuilder::on(area)
                .caption(caption, ("sans-serif", 16))
                .margin(10)
                .x_label_area_size(30)
                .y_label_area_size(50)
                .build_cartesian_2d(1.0..n, 0.0..ymax)
                .map_err(|e| anyhow!("{e}"))?;
            chart
                .configure_mesh()
                .x_desc("epoch")
                .draw()
                .map_err(|e| anyhow!("{e}"))?;
            for (label, ys, color) in lines {
                chart
                    .draw_series(LineSeries::new(
                        xs.iter().cloned().zip(ys),
                        color.stroke_width(2),
                    ))
                    .map_err(|e| anyhow!("{e}"))?
                    .label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], color));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| anyhow!("{e}"))?;
        }
        root.present().map_err(|e| anyhow!("{e}"))?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(())
}
