;; Answers its step with 100 bytes at 0xffff0000, far outside its 64 KiB memory.
(module
  (memory (export "memory") 1)
  ;; The init answer, Ok(()): one zero byte at address 0.
  (data (i32.const 0) "\00")
  (func (export "wfhost_reserve") (param i32) (result i32) i32.const 1024)
  (func (export "wfhost_init") (param i32) (result i64) i64.const 1)
  (func (export "wfhost_step") (param i32) (result i64) i64.const 0xffff000000000064)
  (func (export "wfhost_panic_message") (result i64) i64.const 0)
  (@custom "wfhost-manifest" "wfhost-abi 2\nentry go\n"))
