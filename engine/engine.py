"""Engine: the public API. Requests from any thread are batched by one engine loop.

    engine = Engine(EngineConfig(model=None))
    outs = engine.generate(["text", [1, 2, 3]], SamplingParams(max_tokens=64, temperature=0.0))
    for out in engine.stream(messages, params): ...

Vision models also take images: message parts {"type": "image", "image": PIL.Image | path},
or {"prompt": "...<|vision_start|><|image_pad|><|vision_end|>...",
    "multi_modal_data": {"image": [images]}}.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from typing import Iterator, List, Optional, Sequence, Tuple, Union

from .config import EngineConfig, SamplingParams
from .errors import EngineDeadError, PromptTooLongError, RequestRejected
from .kv_cache import KVCacheManager
from .model_setup import ModelSource, build_model_and_runner
from .output_processor import RequestStream
from .overlap import InFlight, can_launch_ahead, next_decode_step
from .outputs import RequestOutput
from .prompt_inputs import is_messages, parse_prompt
from .request import MultiModalItem, Request, RequestStatus
from .scheduler import Scheduler

log = logging.getLogger("longread.engine")

Prompt = Union[str, List[int], dict]


class Engine:
    def __init__(self, config: Optional[EngineConfig] = None, model_source: Optional[ModelSource] = None,
                 **overrides):
        config = config or EngineConfig()
        for key, value in overrides.items():
            if not hasattr(config, key):
                raise TypeError(f"unknown engine setting {key!r}")
            setattr(config, key, value)
        self.config = config
        setup = build_model_and_runner(config, model_source)
        self.model_dir, self.hf_config, self.tokenizer = setup.model_dir, setup.hf_config, setup.tokenizer
        self.device, self.dtype = setup.device, setup.dtype
        self.max_model_len, self.eos_token_ids = setup.max_model_len, setup.eos_token_ids
        self.runner, self.memory = setup.runner, setup.memory
        self.vision = setup.vision    # VisionSupport (vision models) or None
        self.kv = KVCacheManager(setup.num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(self.kv, config.max_num_batched_tokens, config.max_num_seqs,
                                   setup.cost_model, config.max_step_time or None,
                                   vision=self.vision.cache if self.vision else None,
                                   chunk_granule=getattr(self.runner.attention, "chunk_granule", 1),
                                   chunk_slice=getattr(self.runner.attention, "query_slice", 1))
        self._streams: dict = {}      # live requests (engine loop side)
        self._handles: dict = {}      # request id -> stream until its caller has read the end
        self._new: List[RequestStream] = []
        self._aborts: List[str] = []
        self._reset_cache = False
        self._cv = threading.Condition()
        self._ids = itertools.count()
        self._stopped = False
        self._fatal: Optional[BaseException] = None
        self.num_steps = 0
        self._inflight: Optional[InFlight] = None   # a decode step launched, tokens not read yet
        self.num_steps_ahead = 0      # decode steps launched before the previous one's tokens landed
        # (applied time, decodes, [(prefill start, tokens)], GPU span) of recent steps, for diagnostics
        self._step_log: deque = deque(maxlen=4096)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="longread-engine", daemon=True)
        self._thread.start()
        self._ready.wait()            # the loop thread warms up its kernels first

    @property
    def model_name(self) -> str:
        return self.config.model or "SmolLM2-135M-Instruct (default)"

    @property
    def supports_images(self) -> bool:
        """Whether the loaded model has a vision tower (image parts are rejected otherwise)."""
        return bool(getattr(self.runner.model, "supports_images", False))

    # --- prompts -------------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[dict]) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise RequestRejected("this model has no chat template; use generate() with a plain prompt")
        return self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)

    def _parse(self, prompt: Prompt) -> Tuple[Optional[str], List[int], List[MultiModalItem]]:
        """(text, token ids with each image's placeholder expanded, image items) of any prompt."""
        parsed = parse_prompt(prompt, self.tokenizer, self.apply_chat_template,
                              keep_image_parts=self.vision is not None)
        if self.vision is None:
            if parsed.images:
                raise RequestRejected(
                    f"{self.model_name} does not accept images: it has no vision tower. Remove the "
                    f"image, or start the engine with a vision-language model (model='demo-vl', "
                    f"or a Qwen2-VL / Qwen2.5-VL directory)")
            return parsed.text, parsed.token_ids, []
        token_ids, items = self.vision.expand(parsed.token_ids, parsed.images)
        return parsed.text, token_ids, items

    def tokenize(self, prompt: Prompt) -> tuple:
        """(text or None, token ids) for a string, a token list, a prompt dict or messages.
        Each image counts its exact tokens (placeholders and separators)."""
        text, token_ids, _ = self._parse(prompt)
        return text, token_ids

    def count_tokens(self, prompt: Prompt) -> int:
        return len(self.tokenize(prompt)[1])

    def cached_prefix_tokens(self, prompt: Prompt) -> int:
        """How many leading tokens of this prompt (token ids or any prompt form, images
        included) the prefix cache holds right now (a peek; counts nothing)."""
        _, token_ids, items = self._parse(prompt)
        probe = Request("probe", token_ids, SamplingParams(), mm_items=items)
        return len(self.kv.find_cached_prefix(probe)) * self.config.block_size

    # --- submission ----------------------------------------------------------------------
    def _check(self, token_ids: List[int]) -> None:
        if not token_ids:
            raise RequestRejected("the prompt is empty")
        vocab = self.hf_config.get_text_config().vocab_size
        if min(token_ids) < 0 or max(token_ids) >= vocab:
            raise RequestRejected(f"prompt token ids must be in [0, {vocab}); got {min(token_ids)}..{max(token_ids)}")
        if len(token_ids) >= self.max_model_len:
            raise PromptTooLongError(len(token_ids), self.max_model_len - 1,
                                     f"max_model_len {self.max_model_len} minus 1 token to answer")
        needed = self.kv.blocks_for(len(token_ids) + 1)
        if needed > self.kv.num_blocks:
            raise PromptTooLongError(len(token_ids), self.kv.num_blocks * self.config.block_size - 1,
                                     "KV cache capacity; raise kv_cache_memory")

    def submit(self, prompt: Prompt, params: Optional[SamplingParams] = None,
               request_id: Optional[str] = None) -> str:
        """Queue a request; returns its id. Raises RequestRejected for prompts that can never run.
        Read its outputs with `outputs(request_id)`."""
        if self._stopped:
            raise EngineDeadError("engine is shut down") from self._fatal
        params = params or SamplingParams()
        text, token_ids, items = self._parse(prompt)
        if items:
            self.vision.check(items, self.max_model_len, self.kv.num_blocks * self.config.block_size)
        self._check(token_ids)
        request_id = request_id or f"req-{next(self._ids)}"
        request = Request(request_id, token_ids, params, prompt=text, mm_items=items,
                          eos_token_ids=self.eos_token_ids)
        if items:
            self.vision.attach(request)
        self.kv.hash_prompt(request)
        stream = RequestStream(request, self.tokenizer, self.max_model_len)
        with self._cv:
            if request_id in self._streams:
                raise RequestRejected(f"request id {request_id!r} is already in use")
            self._streams[request_id] = stream
            self._handles[request_id] = stream
            self._new.append(stream)
            self._cv.notify()
        return request_id

    def abort(self, request_id: str) -> None:
        with self._cv:
            self._aborts.append(request_id)
            self._cv.notify()

    def reset_prefix_cache(self) -> None:
        """Forget every cached prefix (blocks in use are untouched): the next read is cold.
        Applied by the engine loop between steps."""
        with self._cv:
            self._reset_cache = True
            self._cv.notify()

    def outputs(self, request_id: str) -> Iterator[RequestOutput]:
        """Incremental outputs of a submitted request; aborts it if the consumer stops early."""
        stream = self._handles.get(request_id)
        if stream is None:
            raise KeyError(f"unknown request id {request_id!r}")
        finished = False
        try:
            while not finished:
                out = stream.queue.get()
                finished = out.finished
                yield out
        finally:
            self._handles.pop(request_id, None)
            if not finished:
                self.abort(request_id)

    def stream(self, prompt: Prompt, params: Optional[SamplingParams] = None,
               request_id: Optional[str] = None) -> Iterator[RequestOutput]:
        return self.outputs(self.submit(prompt, params, request_id))

    def generate(self, prompts: Union[Prompt, Sequence[Prompt]],
                 params: Union[None, SamplingParams, Sequence[SamplingParams]] = None) -> List[RequestOutput]:
        if isinstance(prompts, (str, dict)) or is_messages(prompts) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        param_list = params if isinstance(params, (list, tuple)) else [params] * len(prompts)
        ids = [self.submit(p, sp) for p, sp in zip(prompts, param_list)]
        results = []
        for rid in ids:
            last = None
            for last in self.outputs(rid):
                pass
            results.append(last)
        return results

    def chat(self, messages, params: Optional[SamplingParams] = None) -> List[RequestOutput]:
        """One conversation (list of messages) or several (list of lists)."""
        conversations = [messages] if is_messages(messages) else list(messages)
        return self.generate(conversations, params)

    # --- engine loop ---------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            try:
                self.runner.warm_up()     # per-thread kernel plans belong to this thread
            finally:
                self._ready.set()
            while True:
                with self._cv:
                    while not (self._stopped or self._new or self._aborts or self._reset_cache
                               or self.scheduler.has_work() or self._inflight is not None):
                        self._cv.wait()
                    if self._stopped:
                        break
                    new, self._new = self._new, []
                    aborts, self._aborts = self._aborts, []
                    reset, self._reset_cache = self._reset_cache, False
                if reset:
                    self.kv.reset_prefix_cache()
                for stream in new:
                    self.scheduler.add(stream.request)
                for request_id in aborts:
                    self._finish_abort(request_id)
                if self.scheduler.has_work() or self._inflight is not None:
                    self.step()
        except BaseException as exc:          # a bug in the loop: fail everyone loudly
            log.exception("engine loop died")
            self._fatal = exc
            self._stopped = True
            for stream in list(self._streams.values()):
                stream.request.error = f"engine stopped: {exc!r}"
                stream.request.finish_reason = "error"
                stream.publish(finished=True)

    def _finish_abort(self, request_id: str) -> None:
        stream = self._streams.get(request_id)
        if stream is None or stream.request.is_finished:
            return
        self._finish(stream, "abort")

    def _finish(self, stream: RequestStream, reason: Optional[str] = None) -> None:
        req = stream.request
        self.scheduler.remove(req)
        if reason is not None:
            req.finish_reason = reason
        req.status = RequestStatus.FINISHED
        req.metrics.finished_time = time.monotonic()
        stream.publish(finished=True)
        self._streams.pop(req.request_id, None)

    def step(self) -> None:
        """Run one step (called by the engine loop). With decode overlap, a decode
        step may stay in flight when this returns: the next call launches its successor,
        then reads its tokens."""
        if self._inflight is not None:
            self._advance_inflight()
            return
        began = time.monotonic()
        out = self.scheduler.schedule()
        if out.is_empty:
            time.sleep(0.001)
            return
        now = time.monotonic()
        for chunk in out.chunks:
            if chunk.request.metrics.first_scheduled_time is None:
                chunk.request.metrics.first_scheduled_time = now
        try:
            if self.config.overlap_decode and can_launch_ahead(out.chunks):
                self._inflight = InFlight(out.chunks, self.runner.launch_ahead(out.chunks), self.runner.last_span)
                return
            tokens, logprobs = self.runner.execute(out.chunks)
        except Exception as exc:
            self._fail_step(out.chunks, exc)
            return
        self._apply(out.chunks, tokens, logprobs, self.runner.last_span)
        self.scheduler.observe_step(time.monotonic() - began)      # budgeted steps calibrate the time model

    def _advance_inflight(self) -> None:
        """Launch the decode step after the one in flight (when nothing else needs the
        scheduler), then read and apply the in-flight step's tokens."""
        flight, self._inflight = self._inflight, None
        nxt = None
        try:
            if not (self._new or self._aborts or self._reset_cache or self.scheduler.waiting):
                follow = next_decode_step(flight, self.scheduler.running, self.kv, self.max_model_len)
                if follow is not None:
                    chunks, input_ids = follow
                    nxt = InFlight(chunks, self.runner.launch_ahead(chunks, input_ids), self.runner.last_span)
                    self.num_steps_ahead += 1
            tokens = flight.tokens.wait()
        except Exception as exc:
            self._fail_step(flight.chunks + (nxt.chunks if nxt else []), exc)
            return
        self._apply(flight.chunks, tokens, [None] * len(tokens), flight.span)
        self._inflight = nxt

    def _fail_step(self, chunks, exc: Exception) -> None:
        log.exception("step failed")
        for chunk in chunks:
            stream = self._streams.get(chunk.request.request_id)
            if stream is not None and not stream.request.is_finished:
                stream.request.error = f"{type(exc).__name__}: {exc}"
                self._finish(stream, "error")

    def _apply(self, chunks, tokens, logprobs, span=None) -> None:
        """Record a finished step: computed tokens, cached blocks, sampled tokens, outputs.
        Requests that ended while the step was in flight are skipped (their rows are waste)."""
        self.num_steps += 1
        now = time.monotonic()
        # The span's events are read later (recent_steps): a prefill step that samples
        # nothing is applied without waiting for the device.
        self._step_log.append((now, sum(1 for c in chunks if c.num_tokens == 1 and c.start > 0),
                               [(c.start, c.num_tokens) for c in chunks if c.num_tokens > 1 or c.start == 0], span))
        sampled = iter(zip(tokens, logprobs))
        for chunk in chunks:
            token, lp = next(sampled) if chunk.completes else (None, None)
            req = chunk.request
            stream = self._streams.get(req.request_id)
            if stream is None or req.is_finished:
                continue
            req.num_computed_tokens = chunk.end
            self.scheduler.release_consumed(req)     # image rows now in the KV cache are freed
            req.metrics.num_computed_prompt_tokens = max(req.metrics.num_computed_prompt_tokens,
                                                         min(chunk.end, req.num_prompt_tokens))
            self.kv.cache_computed_blocks(req)
            if chunk.completes:
                if stream.append_token(token, lp, now):
                    self._finish(stream)
                    continue
            stream.publish()

    # --- introspection -------------------------------------------------------------------
    def recent_steps(self) -> List[dict]:
        """The last few thousand steps: when each was applied (monotonic s), the gap since the
        previous one (what a reader waits between tokens), its decodes and prefill chunks, and
        on a GPU the time from its first kernel to its last (gap minus that: host time)."""
        log_ = list(self._step_log)
        return [{"time": t, "gap_s": t - log_[i - 1][0] if i else None, "decodes": d, "prefill": p,
                 "gpu_s": _span_seconds(g)} for i, (t, d, p, g) in enumerate(log_)]

    def stats(self) -> dict:
        pool = self.kv.pool
        return {
            "kv_blocks_total": pool.num_blocks,
            "kv_blocks_free": pool.num_free,
            "kv_blocks_cached": pool.num_cached_free,
            "kv_block_size": self.config.block_size,
            "num_running": len(self.scheduler.running),
            "num_waiting": len(self.scheduler.waiting) + len(self._new),
            "prefix_cache_queries": self.kv.prefix_cache_queries,
            "prefix_cache_hits": self.kv.prefix_cache_hits,
            "num_preemptions": self.scheduler.num_preemptions,
            "num_steps": self.num_steps,
            "num_steps_ahead": self.num_steps_ahead,
            "max_model_len": self.max_model_len,
            "device": str(self.device),
            "dtype": str(self.dtype).replace("torch.", ""),
            "memory": dict(self.memory),
            "alive": not self._stopped,
            **(self.vision.stats() if self.vision else {}),
        }

    def shutdown(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()


def _span_seconds(span) -> Optional[float]:
    """Seconds between a step's CUDA events, or None (no span, or not finished yet)."""
    if not span or not span[1].query():
        return None
    return span[0].elapsed_time(span[1]) / 1000
