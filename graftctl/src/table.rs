//! Plain aligned tables, as kubectl prints them.

/// How a table is printed: `-o wide` adds columns, `--no-headers` drops the header line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Style {
    /// `-o wide`: every column.
    pub wide: bool,
    /// The header line (false with `--no-headers`).
    pub headers: bool,
}

/// Columns separated by at least three spaces, headers in capitals, the last column unpadded.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Self {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, with its header line unless `headers` is false (`--no-headers`).
    pub fn render(&self, headers: bool) -> String {
        let cols = self.headers.len();
        let mut width: Vec<usize> = self
            .headers
            .iter()
            .map(|h| if headers { h.chars().count() } else { 1 })
            .collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let header_line: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        let skip = usize::from(!headers);
        for r in std::iter::once(&header_line).chain(&self.rows).skip(skip) {
            let mut line = String::new();
            for (i, w) in width.iter().enumerate() {
                let cell = r.get(i).map(String::as_str).unwrap_or("");
                let cell = if cell.is_empty() { "-" } else { cell };
                line.push_str(cell);
                if i + 1 < cols {
                    let pad = (*w).max(1) - cell.chars().count() + 3;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Control characters from state files are shown escaped: a file another process wrote
/// must not be able to move the terminal's cursor.
pub fn clean(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_with_dashes_for_empty_cells() {
        let mut t = Table::new(&["NAME", "HEALTH", "CLAIM"]);
        t.row(vec!["fuse".into(), "Healthy".into(), "".into()]);
        t.row(vec!["gpu-0".into(), "Unhealthy".into(), "ns/c".into()]);
        assert_eq!(
            t.render(true),
            "NAME    HEALTH      CLAIM\n\
             fuse    Healthy     -\n\
             gpu-0   Unhealthy   ns/c\n"
        );
        // Without headers, as kubectl's --no-headers: widths from the rows alone.
        let mut t = Table::new(&["NAME", "HEALTH", "CLAIM"]);
        t.row(vec!["a".into(), "ok".into(), "".into()]);
        assert_eq!(t.render(false), "a   ok   -\n");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(clean("a\u{1b}[2Jb\n"), "a\\u{1b}[2Jb\\n");
    }
}
