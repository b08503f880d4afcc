//! `wfhost:native`: the context's commands, in Rust, over the guest SDK, for the `wfhost`
//! module's `Context`; and the few host services the globals (`engine.rs`) are made of. A
//! command starts when called (the SDK yields it to the host with the step) and returns the
//! promise its completion settles (`drive.rs`).

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use boa_engine::module::SyntheticModuleInitializer;
use boa_engine::object::builtins::{JsArray, JsArrayBuffer, JsUint8Array};
use boa_engine::object::ObjectInitializer;
use boa_engine::{
    js_error, js_string, Context, JsArgs, JsObject, JsResult, JsString, JsValue, Module,
    NativeFunction,
};
use wfguest::{Header, HttpRequest, Level, Pid};

use crate::drive::{self, ctx};
use crate::values::{to_js, to_json};

type Native = fn(&JsValue, &[JsValue], &mut Context) -> JsResult<JsValue>;

/// The commands, as `wfhost:native` exports them.
const COMMANDS: &[(&str, Native)] = &[
    ("sleep", sleep),
    ("now", now),
    ("random", random),
    ("log", log),
    ("send", send),
    ("recv", recv),
    ("spawn", spawn),
    ("join", join),
    ("cancel", cancel),
    ("call", call),
    ("http", http),
    ("patched", patched),
    ("select", select),
];

/// What the globals are made of (`engine.rs` hands them to the prelude).
const SERVICES: &[(&str, Native)] = &[
    ("print", print),
    ("randomBytes", random_bytes),
    ("utf8Encode", utf8_encode),
    ("utf8Decode", utf8_decode),
];

/// The `wfhost:native` module.
pub(crate) fn module(context: &mut Context) -> Module {
    let names: Vec<JsString> = COMMANDS.iter().map(|(name, _)| js_string!(*name)).collect();
    Module::synthetic(
        &names,
        SyntheticModuleInitializer::from_copy_closure(|module, context| {
            for (name, function) in COMMANDS {
                let function =
                    NativeFunction::from_fn_ptr(*function).to_js_function(context.realm());
                module.set_export(&js_string!(*name), function.into())?;
            }
            Ok(())
        }),
        None,
        None,
        context,
    )
}

/// An object of the host services, for the prelude.
pub(crate) fn services(context: &mut Context) -> JsObject {
    let mut object = ObjectInitializer::new(context);
    for (name, function) in SERVICES {
        object.function(NativeFunction::from_fn_ptr(*function), js_string!(*name), 1);
    }
    object.build()
}

fn none(_: &mut Context, (): ()) -> JsResult<JsValue> {
    Ok(JsValue::undefined())
}

fn json(context: &mut Context, value: serde_json::Value) -> JsResult<JsValue> {
    to_js(&value, context)
}

fn string(args: &[JsValue], at: usize, context: &mut Context) -> JsResult<String> {
    Ok(args
        .get_or_undefined(at)
        .to_string(context)?
        .to_std_string_escaped())
}

fn milliseconds(value: &JsValue, context: &mut Context) -> JsResult<Duration> {
    let ms = value.to_number(context)?;
    Duration::try_from_secs_f64(ms / 1000.0).map_err(|_| {
        js_error!(TypeError: "a duration is a number of milliseconds, 0 or more; {} is not one", ms)
    })
}

fn pid(value: &JsValue, context: &mut Context) -> JsResult<Pid> {
    let number = value.to_number(context)?;
    if number.fract() != 0.0 || !(0.0..=9_007_199_254_740_991.0).contains(&number) {
        return Err(js_error!(TypeError: "{} is not a pid", number));
    }
    Ok(Pid(number as u64))
}

fn pid_value(pid: Pid) -> JsValue {
    JsValue::new(pid.0 as f64)
}

/// The bytes of a `Uint8Array`.
fn bytes(value: &JsValue, context: &mut Context) -> JsResult<Vec<u8>> {
    let array = value
        .as_object()
        .and_then(|object| JsUint8Array::from_object(object).ok())
        .ok_or_else(|| js_error!(TypeError: "expected a Uint8Array"))?;
    let offset = array.byte_offset(context)?;
    let length = array.byte_length(context)?;
    let buffer = array
        .buffer(context)?
        .as_object()
        .and_then(|object| JsArrayBuffer::from_object(object).ok())
        .ok_or_else(|| js_error!(TypeError: "a Uint8Array without its buffer"))?;
    let data = buffer
        .data()
        .ok_or_else(|| js_error!(TypeError: "the Uint8Array's buffer was detached"))?;
    data.get(offset..offset + length)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| js_error!(TypeError: "the Uint8Array lies outside its buffer"))
}

/// `n` bytes from WASI's `random_get`, which a durable host journals.
pub(crate) fn entropy(bytes: &mut [u8]) -> JsResult<()> {
    getrandom::fill(bytes).map_err(|e| js_error!(Error: "the host gave no randomness: {}", e))
}

fn sleep(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let duration = milliseconds(args.get_or_undefined(0), context)?;
    Ok(drive::promise(ctx()?.sleep(duration), none, context))
}

/// The host's time in whole milliseconds since the Unix epoch, as `Date.now()` reads it: the
/// time the step began (`engine::step_time`).
fn now(_: &JsValue, _: &[JsValue], _: &mut Context) -> JsResult<JsValue> {
    Ok(JsValue::new(crate::engine::step_time().as_millis() as f64))
}

/// A number in [0, 1) from 53 journaled random bits.
fn random(_: &JsValue, _: &[JsValue], _: &mut Context) -> JsResult<JsValue> {
    let mut bytes = [0u8; 8];
    entropy(&mut bytes)?;
    let bits = u64::from_le_bytes(bytes) >> 11;
    Ok(JsValue::new(bits as f64 / (1u64 << 53) as f64))
}

fn log(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let level = match string(args, 0, context)?.as_str() {
        "warn" => Level::Warn,
        _ => Level::Info,
    };
    ctx()?.log(level, string(args, 1, context)?);
    Ok(JsValue::undefined())
}

fn send(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let to = pid(args.get_or_undefined(0), context)?;
    let value = to_json(args.get_or_undefined(1), context)?;
    Ok(drive::promise(ctx()?.send(to, &value), none, context))
}

/// The message future and, with a timeout, its timer are made here, when `recv` is called: the
/// timer's command goes out in order with the others the code starts.
fn recv(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let ctx = ctx()?;
    let timeout = args.get_or_undefined(0);
    let timeout = if timeout.is_undefined() {
        None
    } else {
        Some(milliseconds(timeout, context)?)
    };
    let message = ctx.recv_message();
    let Some(timeout) = timeout else {
        return Ok(drive::promise(
            async move { message.await?.decode::<serde_json::Value>() },
            json,
            context,
        ));
    };
    let timer = ctx.sleep(timeout);
    Ok(drive::promise(
        async move {
            let mut message = std::pin::pin!(message);
            let mut timer = std::pin::pin!(timer);
            std::future::poll_fn(|cx| {
                if let Poll::Ready(message) = message.as_mut().poll(cx) {
                    return Poll::Ready(
                        message.and_then(|m| m.decode::<serde_json::Value>().map(Some)),
                    );
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(Ok(())) => Poll::Ready(Ok(None)),
                    Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await
        },
        |context, value| match value {
            Some(value) => json(context, value),
            None => Ok(JsValue::undefined()),
        },
        context,
    ))
}

fn spawn(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let entry = string(args, 0, context)?;
    let input = to_json(args.get_or_undefined(1), context)?;
    Ok(drive::promise(
        ctx()?.spawn(&entry, &input),
        |_, pid| Ok(pid_value(pid)),
        context,
    ))
}

fn join(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let child = pid(args.get_or_undefined(0), context)?;
    Ok(drive::promise(
        ctx()?.join::<serde_json::Value>(child),
        json,
        context,
    ))
}

fn cancel(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let child = pid(args.get_or_undefined(0), context)?;
    Ok(drive::promise(ctx()?.cancel(child), none, context))
}

fn call(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let name = string(args, 0, context)?;
    let input = to_json(args.get_or_undefined(1), context)?;
    Ok(drive::promise(
        ctx()?.call::<_, serde_json::Value>(&name, &input),
        json,
        context,
    ))
}

/// `head`: `{method, url, headers: [[name, value], ...], timeout: ms or null}`; the body's
/// bytes. Answers `[status, [[name, value], ...], body]`.
fn http(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    #[derive(serde::Deserialize)]
    struct Head {
        method: String,
        url: String,
        headers: Vec<(String, String)>,
        timeout: Option<f64>,
    }
    let head: Head = serde_json::from_value(to_json(args.get_or_undefined(0), context)?)
        .map_err(|e| js_error!(TypeError: "an HTTP request: {}", e))?;
    let timeout = head
        .timeout
        .map(|ms| milliseconds(&JsValue::new(ms), context))
        .transpose()?;
    let mut request = HttpRequest::new(head.method, head.url);
    request.headers = head
        .headers
        .into_iter()
        .map(|(name, value)| Header { name, value })
        .collect();
    request.body = bytes(args.get_or_undefined(1), context)?;
    request.timeout = timeout;
    Ok(drive::promise(
        ctx()?.http(request),
        |context, response| {
            let headers: Vec<JsValue> = response
                .headers
                .into_iter()
                .map(|header| {
                    JsArray::from_iter(
                        [
                            JsValue::new(js_string!(header.name.as_str())),
                            JsValue::new(js_string!(header.value.as_str())),
                        ],
                        context,
                    )
                    .into()
                })
                .collect();
            let headers = JsArray::from_iter(headers, context);
            let body = JsUint8Array::from_iter(response.body, context)?;
            Ok(JsArray::from_iter(
                [JsValue::new(response.status), headers.into(), body.into()],
                context,
            )
            .into())
        },
        context,
    ))
}

fn patched(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let change = string(args, 0, context)?;
    if change.len() > wfcontract::abi::MAX_PATCH_NAME {
        return Err(js_error!(
            RangeError: "a change id is at most {} bytes",
            wfcontract::abi::MAX_PATCH_NAME
        ));
    }
    Ok(JsValue::new(ctx()?.patched(&change)))
}

/// `select(...commands)`: see [`drive::select`].
fn select(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    drive::select(args, context)
}

/// `print(stream, text)`: a line on stdout (1) or stderr (2), as `console` writes.
fn print(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    use std::io::Write as _;
    let stream = args.get_or_undefined(0).to_number(context)?;
    let text = string(args, 1, context)?;
    // A host that takes no output is no reason to fail the workflow.
    if stream == 2.0 {
        let _ = writeln!(std::io::stderr(), "{text}");
    } else {
        let mut stdout = std::io::stdout();
        let _ = writeln!(stdout, "{text}");
        let _ = stdout.flush();
    }
    Ok(JsValue::undefined())
}

/// `randomBytes(n)`: a Uint8Array of `n` journaled random bytes (at most 65,536, as
/// `crypto.getRandomValues` allows).
fn random_bytes(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let n = args.get_or_undefined(0).to_number(context)?;
    if !(0.0..=65_536.0).contains(&n) || n.fract() != 0.0 {
        return Err(js_error!(
            RangeError: "at most 65536 random bytes at once; {} were asked for",
            n
        ));
    }
    let mut bytes = vec![0u8; n as usize];
    entropy(&mut bytes)?;
    Ok(JsUint8Array::from_iter(bytes, context)?.into())
}

fn utf8_encode(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let text = args.get_or_undefined(0).to_string(context)?;
    Ok(JsUint8Array::from_iter(text.to_std_string_lossy().into_bytes(), context)?.into())
}

fn utf8_decode(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let bytes = bytes(args.get_or_undefined(0), context)?;
    Ok(JsValue::new(js_string!(
        String::from_utf8_lossy(&bytes).as_ref()
    )))
}
