//! Fails when `wfhost.wit` and the Rust wire types drift apart.
//!
//! The Rust side is read with serde-reflection: the exact shapes postcard encodes (field order,
//! variant order, field types). The WIT side is parsed with wit-parser. Every container on either
//! side must exist on the other with the same name (kebab-case in WIT), the same fields or cases in
//! the same order, and the same types.

use std::collections::BTreeMap;

use serde_reflection::{
    ContainerFormat, Format, Named, Registry, Tracer, TracerConfig, VariantFormat,
};
use wfcontract::{abi, InitRequest, StepOutput};
use wit_parser::{Resolve, Type, TypeDefKind, TypeId, WorldItem};

fn kebab(rust: &str) -> String {
    let mut out = String::new();
    for (i, c) in rust.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else if c == '_' {
            out.push('-');
        } else {
            out.push(c);
        }
    }
    out
}

fn rust_registry() -> Registry {
    let mut tracer = Tracer::new(TracerConfig::default());
    // Enums first: tracing one walks all of its variants, tracing a struct only the first.
    tracer.trace_simple_type::<wfcontract::Encoding>().unwrap();
    tracer.trace_simple_type::<wfcontract::ErrorKind>().unwrap();
    tracer.trace_simple_type::<wfcontract::EventKind>().unwrap();
    tracer.trace_simple_type::<wfcontract::Level>().unwrap();
    tracer.trace_simple_type::<wfcontract::Command>().unwrap();
    tracer.trace_simple_type::<wfcontract::Status>().unwrap();
    tracer.trace_simple_type::<StepOutput>().unwrap();
    tracer.trace_simple_type::<InitRequest>().unwrap();
    tracer
        .trace_simple_type::<wfcontract::HttpRequest>()
        .unwrap();
    tracer
        .trace_simple_type::<wfcontract::HttpResponse>()
        .unwrap();
    tracer
        .trace_simple_type::<wfcontract::RetryPolicy>()
        .unwrap();
    tracer
        .trace_simple_type::<Vec<wfcontract::Event>>()
        .unwrap();
    tracer.registry().unwrap()
}

/// A type as a string both sides can produce: `u64`, `string`, `list<u8>`, `option<pid>`, ...
fn rust_type(format: &Format, registry: &Registry) -> String {
    match format {
        Format::TypeName(name) => match registry.get(name) {
            // Newtypes over primitives (`Pid`, `Tag`) are WIT type aliases.
            Some(ContainerFormat::NewTypeStruct(_)) | Some(_) => kebab(name),
            None => panic!("unregistered type {name}"),
        },
        Format::Bool => "bool".into(),
        Format::U8 => "u8".into(),
        Format::U16 => "u16".into(),
        Format::U32 => "u32".into(),
        Format::U64 => "u64".into(),
        Format::F64 => "f64".into(),
        Format::Str => "string".into(),
        Format::Bytes => "list<u8>".into(),
        Format::Seq(inner) => format!("list<{}>", rust_type(inner, registry)),
        Format::Option(inner) => format!("option<{}>", rust_type(inner, registry)),
        other => panic!("no WIT counterpart chosen for {other:?}"),
    }
}

fn wit_type(ty: &Type, resolve: &Resolve) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::U8 => "u8".into(),
        Type::U16 => "u16".into(),
        Type::U32 => "u32".into(),
        Type::U64 => "u64".into(),
        Type::F64 => "f64".into(),
        Type::String => "string".into(),
        Type::Id(id) => {
            let def = &resolve.types[*id];
            if let Some(name) = &def.name {
                return name.clone();
            }
            match &def.kind {
                TypeDefKind::List(inner) => format!("list<{}>", wit_type(inner, resolve)),
                TypeDefKind::Option(inner) => format!("option<{}>", wit_type(inner, resolve)),
                other => panic!("anonymous WIT type {other:?} has no Rust counterpart"),
            }
        }
        other => panic!("WIT type {other:?} has no Rust counterpart"),
    }
}

/// Each WIT definition, by name, as (kind, [(member, type)]).
fn wit_shapes(resolve: &Resolve, types: &BTreeMap<String, TypeId>) -> BTreeMap<String, Shape> {
    types
        .iter()
        .map(|(name, id)| {
            let shape = match &resolve.types[*id].kind {
                TypeDefKind::Record(record) => Shape::Record(
                    record
                        .fields
                        .iter()
                        .map(|f| (f.name.clone(), wit_type(&f.ty, resolve)))
                        .collect(),
                ),
                TypeDefKind::Variant(variant) => Shape::Variant(
                    variant
                        .cases
                        .iter()
                        .map(|c| (c.name.clone(), c.ty.as_ref().map(|t| wit_type(t, resolve))))
                        .collect(),
                ),
                TypeDefKind::Enum(e) => {
                    Shape::Variant(e.cases.iter().map(|c| (c.name.clone(), None)).collect())
                }
                TypeDefKind::Type(inner) => Shape::Alias(wit_type(inner, resolve)),
                other => panic!("WIT type {name} is a {other:?}, which the contract does not use"),
            };
            (name.clone(), shape)
        })
        .collect()
}

#[derive(Debug, PartialEq, Eq)]
enum Shape {
    Record(Vec<(String, String)>),
    /// Cases in order, with their payload type. WIT enums are variants without payloads.
    Variant(Vec<(String, Option<String>)>),
    Alias(String),
}

fn rust_shapes(registry: &Registry) -> BTreeMap<String, Shape> {
    registry
        .iter()
        .map(|(name, container)| {
            let shape = match container {
                ContainerFormat::Struct(fields) => Shape::Record(
                    fields
                        .iter()
                        .map(|Named { name, value }| (kebab(name), rust_type(value, registry)))
                        .collect(),
                ),
                ContainerFormat::NewTypeStruct(inner) => Shape::Alias(rust_type(inner, registry)),
                ContainerFormat::Enum(variants) => Shape::Variant(
                    variants
                        .values()
                        .map(|Named { name, value }| {
                            let payload = match value {
                                VariantFormat::Unit => None,
                                VariantFormat::NewType(inner) => Some(rust_type(inner, registry)),
                                other => panic!("{name}: variant shape {other:?} has no WIT form"),
                            };
                            (kebab(name), payload)
                        })
                        .collect(),
                ),
                other => panic!("{name}: container {other:?} has no WIT form"),
            };
            (kebab(name), shape)
        })
        .collect()
}

fn parse_wit() -> (Resolve, wit_parser::PackageId) {
    let mut resolve = Resolve::new();
    // Read at build time: the binary always checks the text it was built with.
    let text = include_str!("../wfhost.wit");
    let package = resolve
        .push_str("wfhost.wit", text)
        .expect("wfhost.wit parses");
    (resolve, package)
}

#[test]
fn every_wire_type_matches_its_wit_definition() {
    let (resolve, package) = parse_wit();
    let interface = resolve.packages[package].interfaces["types"];
    let types: BTreeMap<String, TypeId> = resolve.interfaces[interface]
        .types
        .iter()
        .map(|(name, id)| (name.clone(), *id))
        .collect();
    let wit = wit_shapes(&resolve, &types);
    let rust = rust_shapes(&rust_registry());

    let wit_names: Vec<&String> = wit.keys().collect();
    let rust_names: Vec<&String> = rust.keys().collect();
    assert_eq!(
        wit_names, rust_names,
        "the WIT and the Rust define different types"
    );
    for (name, shape) in &rust {
        assert_eq!(
            Some(shape),
            wit.get(name),
            "type {name} differs between Rust and WIT"
        );
    }
}

#[test]
fn the_world_exports_what_the_abi_names() {
    let (resolve, package) = parse_wit();
    let world = resolve.packages[package].worlds["workflow"];
    let mut exports: Vec<String> = resolve.worlds[world]
        .exports
        .values()
        .filter_map(|item| match item {
            WorldItem::Function(f) => Some(f.name.clone()),
            _ => None,
        })
        .collect();
    exports.sort();
    let mut abi_exports: Vec<String> = [
        abi::EXPORT_INIT,
        abi::EXPORT_STEP,
        abi::EXPORT_PANIC_MESSAGE,
    ]
    .iter()
    .map(|name| kebab(name.strip_prefix("wfhost_").expect("exports are prefixed")))
    .collect();
    abi_exports.sort();
    assert_eq!(exports, abi_exports);
}

#[test]
fn the_package_version_is_the_abi_version() {
    let (resolve, package) = parse_wit();
    let version = resolve.packages[package]
        .name
        .version
        .clone()
        .expect("versioned");
    assert_eq!(version.major, u64::from(abi::VERSION));
}
