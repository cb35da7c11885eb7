//! The results' plots, as SVG files beside BENCHMARKS.md.

use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// One line of a chart.
pub struct Series {
    /// Its legend.
    pub label: String,
    /// Its points.
    pub points: Vec<(f64, f64)>,
}

const COLORS: [RGBColor; 6] = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];

/// Draws a line chart to `path`.
pub fn lines(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) {
    let (x_max, y_max) = maxima(series, 1.0);
    chart(path, title, (x_label, y_label), series, 0.0..y_max * 1.1, x_max);
}

/// Draws a line chart with a logarithmic y axis to `path` (y values at least 1).
pub fn log_y(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) {
    let (x_max, y_max) = maxima(series, 10.0);
    chart(
        path,
        title,
        (x_label, y_label),
        series,
        (1.0..y_max * 2.0).log_scale(),
        x_max,
    );
}

/// The largest x and y of the series (at least 1, and `y_min`).
fn maxima(series: &[Series], y_min: f64) -> (f64, f64) {
    let (mut x_max, mut y_max) = (1.0_f64, y_min);
    for s in series {
        for &(x, y) in &s.points {
            x_max = x_max.max(x);
            y_max = y_max.max(y);
        }
    }
    (x_max, y_max)
}

fn chart<Y>(path: &Path, title: &str, (x_label, y_label): (&str, &str), series: &[Series], y: Y, x_max: f64)
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).expect("a drawing area");
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d::<RangedCoordf64, _>((0.0..x_max * 1.05).into(), y)
        .expect("a chart");
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .expect("the axes");
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(s.points.clone(), color.stroke_width(2)))
            .expect("a line")
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .expect("points");
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .expect("the legend");
    root.present().expect("the SVG file");
}
