//! The manifest of a built module: the `wfhost-manifest` custom section hosts read without
//! running anything (`wfcontract::manifest`), appended to the snapshot.

use wfcontract::abi::VERSION;
use wfcontract::manifest::{ABI_KEY, ENTRY_KEY, SECTION};

/// `module` with a custom section `name` holding `data` appended.
pub(crate) fn append_section(module: &mut Vec<u8>, name: &str, data: &[u8]) {
    let mut content = Vec::with_capacity(name.len() + data.len() + 5);
    leb128(&mut content, name.len());
    content.extend_from_slice(name.as_bytes());
    content.extend_from_slice(data);
    module.push(0); // a custom section
    leb128(module, content.len());
    module.extend_from_slice(&content);
}

/// The manifest's text for these entry points.
pub(crate) fn text(entries: &[String]) -> String {
    let mut text = format!("{ABI_KEY} {VERSION}\n");
    for entry in entries {
        text.push_str(&format!("{ENTRY_KEY} {entry}\n"));
    }
    text
}

/// `module` with its manifest.
pub(crate) fn write(module: &mut Vec<u8>, entries: &[String]) {
    append_section(module, SECTION, text(entries).as_bytes());
}

fn leb128(out: &mut Vec<u8>, mut value: usize) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_written_reads_back() {
        let mut module = b"\0asm\x01\0\0\0".to_vec();
        write(
            &mut module,
            &["greet".to_string(), "send-reminder".to_string()],
        );
        let mut found = Vec::new();
        for payload in wasmparser::Parser::new(0).parse_all(&module) {
            if let wasmparser::Payload::CustomSection(section) = payload.unwrap() {
                assert_eq!(section.name(), SECTION);
                found.push(wfcontract::manifest::Manifest::parse(section.data()).unwrap());
            }
        }
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].abi_version, VERSION);
        assert_eq!(found[0].entries, ["greet", "send-reminder"]);
    }

    #[test]
    fn a_long_section_has_a_long_size() {
        let mut module = b"\0asm\x01\0\0\0".to_vec();
        append_section(&mut module, "big", &vec![7u8; 300]);
        let sections: Vec<_> = wasmparser::Parser::new(0)
            .parse_all(&module)
            .filter_map(|p| match p.unwrap() {
                wasmparser::Payload::CustomSection(s) => Some(s.data().len()),
                _ => None,
            })
            .collect();
        assert_eq!(sections, [300]);
    }
}
