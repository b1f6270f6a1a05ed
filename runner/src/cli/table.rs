//! Aligned columns for the listing commands (`ps`, `threads`): each
//! column as wide as its widest cell, numbers right-aligned, the last
//! column (a command line, a model name) left as long as it is.

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A header and rows of cells, rendered with [`Table::render`].
#[derive(Debug)]
pub struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns (name, alignment).
    pub fn new(columns: &[(&'static str, Align)]) -> Self {
        Self {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are empty, extra ones dropped).
    pub fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.columns.len(), String::new());
        self.rows.push(cells);
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The header and the rows, one line each, two spaces between columns.
    pub fn render(&self) -> String {
        let width = |s: &str| s.chars().count();
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                self.rows
                    .iter()
                    .map(|r| width(&r[i]))
                    .chain([width(name)])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let header: Vec<String> = self.columns.iter().map(|(n, _)| (*n).to_owned()).collect();
        let mut out = String::new();
        for cells in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let last = i + 1 == cells.len();
                let pad = widths[i].saturating_sub(width(cell));
                if i > 0 {
                    line.push_str("  ");
                }
                match self.columns[i].1 {
                    Align::Right => {
                        line.push_str(&" ".repeat(pad));
                        line.push_str(cell);
                    }
                    Align::Left => {
                        line.push_str(cell);
                        if !last {
                            line.push_str(&" ".repeat(pad));
                        }
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let mut t = Table::new(&[
            ("THREAD", Align::Left),
            ("PID", Align::Right),
            ("COMMAND", Align::Left),
        ]);
        assert!(t.is_empty());
        t.row(vec!["t-1".into(), "7".into(), "sleep 300".into()]);
        t.row(vec![
            "thread-long".into(),
            "123456".into(),
            "  sh -c x".into(),
        ]);
        assert_eq!(
            t.render(),
            "THREAD          PID  COMMAND\n\
             t-1               7  sleep 300\n\
             thread-long  123456    sh -c x\n"
        );
    }
}
