//! Plain aligned tables, as kubectl prints them.

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

    pub fn render(&self) -> String {
        let cols = self.headers.len();
        let mut width: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let headers: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        for r in std::iter::once(&headers).chain(&self.rows) {
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
            t.render(),
            "NAME    HEALTH      CLAIM\n\
             fuse    Healthy     -\n\
             gpu-0   Unhealthy   ns/c\n"
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(clean("a\u{1b}[2Jb\n"), "a\\u{1b}[2Jb\\n");
    }
}
