//! `Ctx`: what a workflow can ask its host to do.
//!
//! Every method is one [`Command`]: adding a command means adding one method here that builds it
//! and says how to decode its completion.

use std::future::Future;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;
use wfcontract::builtin::HTTP_FUNCTION;
use wfcontract::{
    Command, Encoding, Field, HttpRequest, HttpResponse, Level, LogRecord, Payload, Pid,
    SendRequest, SpawnRequest,
};

use crate::call::{CallFuture, Policy};
use crate::error::{Error, Undecodable};
use crate::join::JoinFuture;
use crate::runtime::{CommandFuture, Message, RecvFuture, Shared};
use crate::Retry;

/// The workflow's handle on its host, passed to every entry point. Cheap to clone.
#[derive(Clone)]
pub struct Ctx {
    pub(crate) state: Shared,
    pub(crate) pid: Pid,
    pub(crate) parent: Option<Pid>,
    pub(crate) entry: std::rc::Rc<str>,
    pub(crate) encoding: Encoding,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("pid", &self.pid)
            .field("entry", &self.entry)
            .finish_non_exhaustive()
    }
}

fn unit(_: Payload) -> Result<(), Error> {
    Ok(())
}

fn decode<T: DeserializeOwned>(payload: Payload) -> Result<T, Error> {
    payload.decode().map_err(Error::from)
}

impl Ctx {
    /// This process's pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The process that spawned this one, if a process did.
    pub fn parent(&self) -> Option<Pid> {
        self.parent
    }

    /// The entry point this process runs.
    pub fn entry(&self) -> &str {
        &self.entry
    }

    pub(crate) fn max_yields(&self) -> u32 {
        u32::try_from(self.state.borrow().max_yields).unwrap_or(u32::MAX)
    }

    /// The encoding the input arrived in. The result goes back in the same one, and so does
    /// everything this workflow sends: messages, children's inputs, host-command inputs. A
    /// workflow started from the CLI (JSON) speaks JSON, so self-describing types such as
    /// `serde_json::Value` work; one started with postcard input speaks compact postcard, which
    /// needs the receiver to know the type.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Payload, Error> {
        Payload::encode(self.encoding, value).map_err(Error::from)
    }

    /// Completes after `duration`. The timer lives in the host; dropping the future before it
    /// completes (say, the losing side of `recv_timeout`) drops the timer too.
    pub fn sleep(&self, duration: Duration) -> CommandFuture<()> {
        CommandFuture::new(&self.state, Command::Sleep(duration), unit).forget_on_drop()
    }

    /// Completes once the host's wall clock reaches `deadline` (at once if it has passed): a
    /// reminder at a set time. Pair it with [`now`](Self::now), not WASI's clock, for a deadline
    /// relative to the present. Dropping it drops the timer, as for [`sleep`](Self::sleep).
    pub fn sleep_until(&self, deadline: SystemTime) -> CommandFuture<()> {
        let nanos = deadline
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        CommandFuture::new(&self.state, Command::SleepUntil(nanos), unit).forget_on_drop()
    }

    /// Writes a line to the host's log. Returns at once: the host does not answer.
    pub fn log(&self, level: Level, message: impl Into<String>) {
        self.log_with(level, message, &[]);
    }

    /// Writes a line with structured fields (`key=value`) to the host's log.
    pub fn log_with(
        &self,
        level: Level,
        message: impl Into<String>,
        fields: &[(&str, &dyn std::fmt::Display)],
    ) {
        let fields = fields
            .iter()
            .map(|(key, value)| Field {
                key: (*key).to_string(),
                value: value.to_string(),
            })
            .collect();
        // Built before borrowing the state: user conversions may call back into the context.
        let record = Command::Log(LogRecord {
            level,
            message: message.into(),
            fields,
        });
        self.state.borrow_mut().issue_unanswered(record);
    }

    /// [`log`](Self::log) at `info`.
    pub fn info(&self, message: impl Into<String>) {
        self.log(Level::Info, message);
    }

    /// [`log`](Self::log) at `warn`.
    pub fn warn(&self, message: impl Into<String>) {
        self.log(Level::Warn, message);
    }

    /// Sends `value` to process `to`, encoded as [`encoding`](Self::encoding) says. Completes once
    /// the message is queued in the receiver's mailbox, or with an error: `no-such-process` when
    /// `to` is unknown or has finished, `mailbox-full` when the receiver has that much waiting.
    ///
    /// To [`Pid::HOST`], the message goes to the application that started this workflow (or its
    /// nearest ancestor started by the application): `Run::recv_message` in an embedding app, a
    /// line on stderr under `wfhost run`.
    pub fn send<T: Serialize + ?Sized>(&self, to: Pid, value: &T) -> CommandFuture<()> {
        match self.encode(value) {
            Ok(message) => self.send_payload(to, message),
            Err(error) => CommandFuture::refused(&self.state, error),
        }
    }

    /// Sends an already encoded message.
    pub fn send_payload(&self, to: Pid, message: Payload) -> CommandFuture<()> {
        let command = Command::Send(SendRequest { to, message });
        CommandFuture::new(&self.state, command, unit)
    }

    /// The next message, whoever sent it, undecoded. Fails with [`Error::Cancelled`] if the
    /// process is cancelled while waiting.
    ///
    /// Messages wait at the host, in this process's bounded mailbox, until a receive asks for
    /// them: the process holds in its memory only the messages its receives asked for, however
    /// many are sent to it, and senders see `mailbox-full` once the mailbox is full.
    pub fn recv_message(&self) -> RecvFuture {
        RecvFuture::new(&self.state)
    }

    /// The next message, decoded as `T`.
    ///
    /// A message that does not decode as `T` (another workflow's mistake, or a hostile sender:
    /// anyone may send to any pid) is [`Error::Undecodable`], which holds the message, its sender
    /// and the reason. Match it to handle such messages; let `?` pass it on and the workflow fails
    /// with a message naming the sender. [`recv_valid`](Self::recv_valid) skips them instead.
    pub async fn recv<T: DeserializeOwned>(&self) -> Result<T, Error> {
        let message = self.recv_message().await?;
        decode_message(message)
    }

    /// The next message that decodes as `T`: messages that do not are logged (at `warn`, with
    /// their sender) and dropped.
    pub async fn recv_valid<T: DeserializeOwned>(&self) -> Result<T, Error> {
        loop {
            match self.recv::<T>().await {
                Err(Error::Undecodable(bad)) => {
                    let error = Error::Undecodable(bad);
                    self.warn(format!("dropped a message: {error}"));
                }
                other => return other,
            }
        }
    }

    /// The next message that decodes as `T`, or `None` if none arrives within `timeout`:
    /// messages that do not decode are logged and dropped, as by [`recv_valid`](Self::recv_valid),
    /// and the timeout runs on across them.
    pub async fn recv_valid_timeout<T: DeserializeOwned>(
        &self,
        timeout: Duration,
    ) -> Result<Option<T>, Error> {
        let mut timer = std::pin::pin!(self.sleep(timeout));
        let mut message = Box::pin(self.recv_message());
        std::future::poll_fn(|cx| loop {
            if let std::task::Poll::Ready(received) = message.as_mut().poll(cx) {
                match received.and_then(decode_message) {
                    Err(Error::Undecodable(bad)) => {
                        self.warn(format!("dropped a message: {}", Error::Undecodable(bad)));
                        message = Box::pin(self.recv_message());
                        continue;
                    }
                    other => return std::task::Poll::Ready(other.map(Some)),
                }
            }
            return match timer.as_mut().poll(cx) {
                std::task::Poll::Ready(Ok(())) => std::task::Poll::Ready(Ok(None)),
                std::task::Poll::Ready(Err(error)) => std::task::Poll::Ready(Err(error)),
                std::task::Poll::Pending => std::task::Poll::Pending,
            };
        })
        .await
    }

    /// The next message decoded as `T`, or `None` if none arrives within `timeout`. A message
    /// that does not decode is [`Error::Undecodable`], as with [`recv`](Self::recv).
    pub async fn recv_timeout<T: DeserializeOwned>(
        &self,
        timeout: Duration,
    ) -> Result<Option<T>, Error> {
        let mut timer = std::pin::pin!(self.sleep(timeout));
        let mut message = std::pin::pin!(self.recv_message());
        std::future::poll_fn(|cx| {
            if let std::task::Poll::Ready(message) = message.as_mut().poll(cx) {
                return std::task::Poll::Ready(message.and_then(decode_message).map(Some));
            }
            match timer.as_mut().poll(cx) {
                std::task::Poll::Ready(Ok(())) => std::task::Poll::Ready(Ok(None)),
                std::task::Poll::Ready(Err(error)) => std::task::Poll::Ready(Err(error)),
                std::task::Poll::Pending => std::task::Poll::Pending,
            }
        })
        .await
    }

    /// Starts entry point `entry` of this module as a child process. Completes with its pid.
    pub fn spawn<I: Serialize + ?Sized>(&self, entry: &str, input: &I) -> CommandFuture<Pid> {
        self.spawn_in(None, entry, input)
    }

    /// Starts entry point `entry` of the module the host loaded under `module`.
    pub fn spawn_module<I: Serialize + ?Sized>(
        &self,
        module: &str,
        entry: &str,
        input: &I,
    ) -> CommandFuture<Pid> {
        self.spawn_in(Some(module), entry, input)
    }

    fn spawn_in<I: Serialize + ?Sized>(
        &self,
        module: Option<&str>,
        entry: &str,
        input: &I,
    ) -> CommandFuture<Pid> {
        let input = match self.encode(input) {
            Ok(input) => input,
            Err(error) => return CommandFuture::refused(&self.state, error),
        };
        let command = Command::Spawn(SpawnRequest {
            module: module.map(str::to_string),
            entry: entry.to_string(),
            input,
        });
        CommandFuture::new(&self.state, command, decode::<Pid>)
    }

    /// The result of process `pid` once it finishes. A child that failed is an
    /// [`Error::Command`] of kind `child-failed`; one that was cancelled (or terminated), of kind
    /// `child-cancelled`; neither fails this process unless passed on with `?`.
    ///
    /// Dropping the future before the child finishes (the losing side of a `select`, a timeout
    /// around it) abandons only the wait: the result is kept for the next `join` of the same pid.
    /// Joins of one process that overlap all get its result.
    pub fn join<T: DeserializeOwned>(&self, pid: Pid) -> JoinFuture<T> {
        JoinFuture::new(&self.state, pid)
    }

    /// Asks process `pid` to stop.
    pub fn cancel(&self, pid: Pid) -> CommandFuture<()> {
        CommandFuture::new(&self.state, Command::Cancel(pid), unit)
    }

    /// Calls host function `name`: one the embedding application registered, an activity worker
    /// serves (`wfhost serve --worker-function`), or a built-in. A failure is retried if the host
    /// sets a retry policy for the function (`--retry`, `HostFunction::retry`); otherwise the
    /// first error is the outcome. [`call_with`](Self::call_with) names a policy of the call's
    /// own.
    pub fn call<I: Serialize + ?Sized, O: DeserializeOwned>(
        &self,
        name: &str,
        input: &I,
    ) -> CallFuture<O> {
        CallFuture::new(self, name, self.encode(input), Policy::Host)
    }

    /// Calls host function `name`, trying again as `retry` says: each attempt and each wait
    /// between two is journaled, so a host that stops mid-backoff resumes the same schedule, and
    /// the history shows every attempt with its error. [`Retry::never`] makes one attempt.
    ///
    /// ```no_run
    /// # async fn charge(ctx: wfguest::Ctx) -> Result<String, wfguest::Error> {
    /// use std::time::Duration;
    /// use wfguest::Retry;
    ///
    /// let policy = Retry::default()
    ///     .initial_interval(Duration::from_millis(200))
    ///     .backoff(2.0)
    ///     .max_attempts(5);
    /// ctx.call_with("payments.charge", &("order-7", 1250), policy).await
    /// # }
    /// ```
    pub fn call_with<I: Serialize + ?Sized, O: DeserializeOwned>(
        &self,
        name: &str,
        input: &I,
        retry: Retry,
    ) -> CallFuture<O> {
        CallFuture::new(self, name, self.encode(input), Policy::Given(retry))
    }

    /// Makes an HTTP request through the host (the built-in `wfhost.http`), which the host must
    /// grant: `wfhost run|serve --allow-http PATTERN`. The response, whatever its status, is
    /// journaled like every completion, so a replay never sends the request again; the request
    /// carries the call's idempotency key as its `Idempotency-Key` header. Failures to get any
    /// response (the address refused, no connection, the time up, a body over the host's limit)
    /// are errors, retried as the host's policy for `wfhost.http` says.
    ///
    /// ```no_run
    /// # async fn quote(ctx: wfguest::Ctx) -> Result<String, wfguest::Error> {
    /// use wfguest::HttpRequest;
    ///
    /// let response = ctx.http(HttpRequest::get("https://api.example.com/quote")).await?;
    /// if !response.is_success() {
    ///     return Err(wfguest::Error::msg(format!("the quote service said {}", response.status)));
    /// }
    /// Ok(String::from_utf8_lossy(&response.body).into_owned())
    /// # }
    /// ```
    pub fn http(&self, request: HttpRequest) -> CallFuture<HttpResponse> {
        self.http_call(request, Policy::Host)
    }

    /// [`http`](Self::http), tried again as `retry` says when no response came.
    pub fn http_with(&self, request: HttpRequest, retry: Retry) -> CallFuture<HttpResponse> {
        self.http_call(request, Policy::Given(retry))
    }

    fn http_call(&self, request: HttpRequest, policy: Policy) -> CallFuture<HttpResponse> {
        // Always postcard: bodies are bytes, which JSON would spell as lists of numbers.
        let input = Payload::encode(Encoding::Postcard, &request).map_err(Error::from);
        CallFuture::new(self, HTTP_FUNCTION, input, policy)
    }

    /// The host's wall-clock time. Workflows should use this rather than WASI's clock: the host
    /// answers it as a command, so a durable host can record and replay it.
    pub fn now(&self) -> CommandFuture<SystemTime> {
        CommandFuture::new(&self.state, Command::Now, |payload| {
            let nanos: u64 = decode(payload)?;
            Ok(SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos))
        })
    }

    /// 64 random bits from the host (for the same reason as [`now`](Self::now)).
    pub fn random(&self) -> CommandFuture<u64> {
        CommandFuture::new(&self.state, Command::Random, decode::<u64>)
    }

    /// Whether the code after patch `name` runs: how a workflow's code changes while workflows
    /// that began under the old code still run (see `wfhost upgrade`).
    ///
    /// ```ignore
    /// let total = if ctx.patched("tax") { net * 1.2 } else { net };
    /// ```
    ///
    /// True in a new execution, and the host journals that it was; in a replay of a history the
    /// old code recorded (before the code had the patch), false, so the replay does what the old
    /// code did and does not diverge; in a replay of a history this code recorded past the
    /// patch point, true again. Ask at the point where old and new code part ways, and keep the
    /// old branch until no running workflow can still replay it; then the call can go (a journal
    /// that recorded it does not mind). A name is at most 256 bytes.
    pub fn patched(&self, name: &str) -> bool {
        patched(name)
    }

    /// True once this process has been asked to stop. A workflow that checks this has seen the
    /// cancel: its next await is not failed on the cancel's account.
    pub fn is_cancelled(&self) -> bool {
        self.state.borrow_mut().observe_cancel()
    }
}

/// A message decoded as `T`, or [`Error::Undecodable`] holding it.
fn decode_message<T: DeserializeOwned>(message: Message) -> Result<T, Error> {
    match message.data.decode::<T>() {
        Ok(value) => Ok(value),
        Err(error) => Err(Error::Undecodable(Box::new(Undecodable {
            from: message.from,
            data: message.data,
            wanted: std::any::type_name::<T>(),
            reason: error.to_string(),
        }))),
    }
}

impl Message {
    /// The message decoded as `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, Error> {
        self.data.decode().map_err(Error::from)
    }
}

#[cfg(target_arch = "wasm32")]
fn patched(name: &str) -> bool {
    #[link(wasm_import_module = "wfhost")]
    extern "C" {
        #[link_name = "patched"]
        fn wfhost_patched(ptr: *const u8, len: usize) -> i32;
    }
    assert!(
        name.len() <= wfcontract::abi::MAX_PATCH_NAME,
        "a patch name is at most {} bytes",
        wfcontract::abi::MAX_PATCH_NAME
    );
    // SAFETY: the host reads `len` bytes at `ptr`, which `name` holds, and keeps nothing.
    unsafe { wfhost_patched(name.as_ptr(), name.len()) == 1 }
}

/// Outside wasm (the SDK's own tests) every execution is new.
#[cfg(not(target_arch = "wasm32"))]
fn patched(_name: &str) -> bool {
    true
}
