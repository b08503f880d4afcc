;; Yields `now` under tag 2^63, past the largest tag a yield may have (2^63 - 1): the stores keep
;; tags as signed 64-bit numbers, so a host that took it would fail its journal.
(module
  (memory (export "memory") 1)
  ;; The init answer, Ok(()): one zero byte at address 0.
  (data (i32.const 0) "\00")
  ;; Status wait, one yield: tag 2^63 (ten varint bytes), command `now` (8); receive 0.
  (data (i32.const 16) "\01\01\80\80\80\80\80\80\80\80\80\01\08\00")
  (func (export "wfhost_reserve") (param i32) (result i32) i32.const 1024)
  (func (export "wfhost_init") (param i32) (result i64) i64.const 1)
  ;; pack(16, 14)
  (func (export "wfhost_step") (param i32) (result i64) i64.const 68719476750)
  (func (export "wfhost_panic_message") (result i64) i64.const 0)
  (@custom "wfhost-manifest" "wfhost-abi 2\nentry go\n"))
