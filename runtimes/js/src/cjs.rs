//! CommonJS modules (most packages in `node_modules`): run once, as Node runs them, with
//! `require`, `module`, `exports`, `__filename` and `__dirname`; an ES module importing one sees
//! `module.exports` as its default export and its names as named exports.

use std::path::Path;

use boa_engine::object::ObjectInitializer;
use boa_engine::property::Attribute;
use boa_engine::{
    js_error, js_string, Context, JsArgs, JsResult, JsString, JsValue, NativeFunction, Script,
    Source,
};

use crate::loader::{self, Loader, WFHOST};

/// Whether the file at `path` is CommonJS: a `.cjs` file, or a `.js` file in `node_modules`
/// whose nearest `package.json` does not say `"type": "module"`. The workflow's own `.js` files
/// are ES modules.
pub(crate) fn is_commonjs(loader: &Loader, path: &str) -> bool {
    if path.ends_with(".cjs") {
        return true;
    }
    if !path.ends_with(".js") || !path.split('/').any(|part| part == "node_modules") {
        return false;
    }
    let mut folder = loader::parent(path);
    loop {
        let manifest = if folder.is_empty() {
            "package.json".to_string()
        } else {
            format!("{folder}/package.json")
        };
        if let Some(manifest) = loader.source(&manifest) {
            let kind = serde_json::from_str::<serde_json::Value>(manifest)
                .ok()
                .and_then(|manifest| {
                    manifest
                        .get("type")
                        .and_then(|t| t.as_str())
                        .map(str::to_owned)
                });
            return kind.as_deref() != Some("module");
        }
        if folder.is_empty() {
            return true;
        }
        folder = loader::parent(folder);
    }
}

/// The `module.exports` of the CommonJS (or JSON) file at `path`, run the first time it is asked
/// for. A module required again while it runs (a cycle) gives what it has exported so far.
pub(crate) fn require_path(
    loader: &Loader,
    path: &str,
    context: &mut Context,
) -> JsResult<JsValue> {
    if let Some(module) = loader.required.borrow().get(path).cloned() {
        return module.get(js_string!("exports"), context);
    }
    let source = loader
        .source(path)
        .ok_or_else(|| js_error!(Error: "cannot find module '{}'", path))?;
    if path.ends_with(".json") {
        let parsed: serde_json::Value =
            serde_json::from_str(source).map_err(|e| js_error!(SyntaxError: "{}: {}", path, e))?;
        return JsValue::from_json(&parsed, context);
    }
    let exports = ObjectInitializer::new(context).build();
    let module = ObjectInitializer::new(context)
        .property(js_string!("exports"), exports.clone(), Attribute::all())
        .property(js_string!("id"), js_string!(path), Attribute::all())
        .build();
    loader
        .required
        .borrow_mut()
        .insert(path.to_string(), module.clone());
    // On the wrapper's first line, so that the file's line numbers are its own.
    let wrapped =
        format!("(function (exports, require, module, __filename, __dirname) {{{source}\n}})");
    let function = Script::parse(
        Source::from_bytes(&wrapped).with_path(Path::new(path)),
        None,
        context,
    )?
    .evaluate(context)?;
    let require = NativeFunction::from_copy_closure_with_captures(
        |_, args, from: &JsString, context| {
            let specifier = args.get_or_undefined(0).to_string(context)?;
            require(
                &from.to_std_string_escaped(),
                &specifier.to_std_string_escaped(),
                context,
            )
        },
        js_string!(path),
    )
    .to_js_function(context.realm());
    let folder = loader::parent(path);
    function
        .as_callable()
        .ok_or_else(|| js_error!(Error: "{} did not compile to a function", path))?
        .call(
            &exports.clone().into(),
            &[
                exports.into(),
                require.into(),
                module.clone().into(),
                js_string!(path).into(),
                js_string!(folder).into(),
            ],
            context,
        )?;
    module.get(js_string!("exports"), context)
}

/// `require(specifier)` from the file at `from`.
fn require(from: &str, specifier: &str, context: &mut Context) -> JsResult<JsValue> {
    let loader = loader::current().ok_or_else(|| js_error!(Error: "no sources to require from"))?;
    let path = loader.resolve(from, specifier)?;
    if path == WFHOST {
        return Ok(loader.wfhost_namespace(context)?.into());
    }
    if !(path.ends_with(".json") || is_commonjs(&loader, &path)) {
        return Err(js_error!(
            Error: "require('{}') in {} names an ES module ({}): import it instead",
            specifier,
            from,
            path
        ));
    }
    require_path(&loader, &path, context)
}
