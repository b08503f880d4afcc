;; Imports a function the host does not provide.
(module
  (import "env" "launch_missiles" (func (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\00")
  (func (export "wfhost_reserve") (param i32) (result i32) i32.const 1024)
  (func (export "wfhost_init") (param i32) (result i64) i64.const 1)
  (func (export "wfhost_step") (param i32) (result i64) i64.const 0)
  (func (export "wfhost_panic_message") (result i64) i64.const 0)
  (@custom "wfhost-manifest" "wfhost-abi 2\nentry go\n"))
