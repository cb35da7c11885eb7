//! The results' plots, as SVG files beside BENCHMARKS.md.

use std::path::Path;

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
    let (mut x_max, mut y_max) = (1.0_f64, 1.0_f64);
    for s in series {
        for &(x, y) in &s.points {
            x_max = x_max.max(x);
            y_max = y_max.max(y);
        }
    }
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).expect("a drawing area");
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max * 1.05, 0.0..y_max * 1.1)
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
