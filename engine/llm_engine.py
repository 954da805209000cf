"""LLMEngine: requests in, one scheduled step at a time, outputs out.

``add_request`` tokenizes and queues, ``step`` schedules a batch, runs it, appends the sampled tokens,
runs the stop checks and returns what changed; ``abort`` drops a request and frees its blocks.
"""

from __future__ import annotations

import json
import logging
import time
from itertools import count
from pathlib import Path

import torch

from guided.errors import ConfigError, GuidedError

from .block_manager import BlockManager
from .budget import BudgetSteering
from .config import Config
from .draft_model import DraftModel
from .grammar_masks import GrammarMasks
from .loader import load_hf_tokenizer
from .model_runner import BitmaskProvider, ModelRunner
from .request import Completion, Request, RequestOutput
from .sampler import SampledTokens, sequence_seed
from .sampling_params import SamplingParams
from .scheduler import ScheduledBatch, Scheduler
from .sequence import Sequence, SequenceStatus
from .speculative import DraftRow, grammar_cut, propose

logger = logging.getLogger(__name__)

GRAMMAR_POLL_S = 0.001  # idle wait of a step that only has compiles in flight


class LLMEngine:
    """Continuous-batching engine over a paged KV cache.

    Parameters
    ----------
    config : Config
        Engine settings (model directory, memory, batching limits, ...).
    tokenizer : transformers tokenizer, optional
        Defaults to the one in ``config.tokenizer`` (a local directory).
    stream : bool
        True: ``step`` returns every request that advanced, text detokenized incrementally. False
        (offline batches): only finished requests, text decoded once at the end unless stop strings
        need it earlier — less work per step.

    Attributes
    ----------
    bitmask_provider : callable or None
        Called once a step with the sequences about to sample, while the forward pass runs; returns
        None or ``(bitmask, rows)``: an int32 ``[num_rows, ceil(vocab_size / 32)]`` bitmask (bit set =
        allowed) and, per sequence, its row in it or -1 (unconstrained). None uses the built-in
        ``GrammarMasks``, which masks the sequences of requests added with a ``grammar``.
    """

    def __init__(self, config: Config, tokenizer=None, stream: bool = True):
        self.config = config
        self.stream = stream
        self.tokenizer = tokenizer if tokenizer is not None else load_hf_tokenizer(config.tokenizer)
        self.eos_token_ids = eos_token_ids(config, self.tokenizer)
        spec = config.speculative
        # (before the target: on CUDA the target's KV pool is sized on the memory the draft model leaves)
        self.drafter = (DraftModel(spec, config, self.tokenizer, self.eos_token_ids)
                        if spec is not None and spec.method == "draft_model" else None)  # fmt: skip
        self.runner = ModelRunner(config, self.eos_token_ids, len(self.tokenizer))
        self.block_manager = BlockManager(
            self.runner.num_blocks, config.block_size, config.enable_prefix_caching
        )
        self.scheduler = Scheduler(config, self.block_manager)
        self.set_decode_graphs(self.runner.graphs)
        self.max_seq_len = min(config.max_model_len, self.runner.num_blocks * config.block_size)
        self.requests: dict[str, Request] = {}
        self.completions: dict[int, Completion] = {}
        self.bitmask_provider: BitmaskProvider | None = None
        self.grammar_masks = GrammarMasks(
            self.vocab_size, config.max_num_seqs, self.runner.device, config.mask_threads, config.mask_wait_s
        )
        self.budget = BudgetSteering(self.eos_token_ids, config.fast_forward)
        self.pending_grammars: dict[str, Request] = {}  # requests whose constraint is still compiling
        self._finished_early: list[Request] = []  # finished before any step (forced text only)
        self.num_output_tokens = 0
        self.num_forced_tokens = 0
        # speculative decoding: draft tokens proposed, accepted, and drafts checked
        self.num_draft_tokens = self.num_accepted_tokens = self.num_drafts_checked = 0
        self.draft_s = 0.0  # time spent drafting
        self._marker_texts: dict[tuple, str] = {}  # end-of-reasoning markers' texts, by token ids
        self._checked: dict[int, list] = {}  # this step's draft-row results, by sequence
        self._ids = count()

    @classmethod
    def from_model(cls, model: str, tokenizer=None, stream: bool = True, **config) -> LLMEngine:
        """An engine for the local model directory ``model`` with ``Config`` fields as keywords."""
        return cls(Config(model=str(model), **config), tokenizer, stream)

    @property
    def vocab_size(self) -> int:
        """The lm_head width (padded past the tokenizer when the checkpoint is); bitmasks cover it."""
        return self.runner.vocab_size

    # ------------------------------------------------------------------ requests
    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        grammar=None,
    ) -> str:
        """Queue a prompt (text or token ids); returns its request id.

        ``grammar`` constrains the output: a compiled grammar (anything with ``matcher()``) or a compile
        in flight (``ready()`` / ``result()``, e.g. guided's ``PendingGrammar``). A request whose
        grammar is still compiling waits outside the scheduler; the batch never waits for it. A compile
        that fails ends that request alone, with ``finish_reason == "error"`` and the message in
        ``RequestOutput.error``.
        """
        self.runner.check_alive()
        params = params or SamplingParams()
        request_id = str(next(self._ids)) if request_id is None else str(request_id)
        if request_id in self.requests:
            raise ConfigError(f"request id {request_id!r} is already in use")
        text, ids = (
            (prompt, self.tokenizer.encode(prompt)) if isinstance(prompt, str) else (None, list(prompt))
        )
        self._check_prompt(ids)
        params.check_for_engine(self.vocab_size, self.config.max_num_seqs)
        seqs = [Sequence(ids, params, request_id, i) for i in range(params.n)]
        for seq in seqs:
            seq.seed = sequence_seed(seq, self.config.seed)
        request = Request(request_id, text, ids, params, seqs, self.tokenizer)
        self.requests[request_id] = request
        for c in request.completions:
            self.completions[c.seq.seq_id] = c
        if grammar is None:
            self._schedule(request)
        elif hasattr(grammar, "matcher"):
            if not self._attach(request, grammar):
                self._finished_early.append(request)
        else:
            request.grammar = grammar
            self.pending_grammars[request_id] = request
        return request_id

    def _schedule(self, request: Request) -> None:
        for seq in request.seqs:
            self.scheduler.add(seq)

    def _attach(self, request: Request, compiled) -> bool:
        """Give each completion its own matcher over the compiled grammar, then schedule it; False
        (the request ended with the error) when that fails.

        Text the grammar forces from its start is appended at once, to be prefilled with the prompt.
        """
        request.grammar = None
        try:
            steer, refusal = self._budget_plan(compiled, request.params, len(request.prompt_token_ids))
            if refusal is not None:
                self._end_with_error(request, refusal)
                return False
            for seq in request.seqs:
                seq.constraint = compiled.matcher()
                seq.budget = steer
                if self.config.fast_forward:
                    self._fast_forward(seq)
                if not seq.is_finished:
                    self.scheduler.add(seq)
        except Exception as e:  # a matcher that cannot be made ends this request alone
            logger.exception("request %s: making its matcher failed", request.request_id)
            self._end_with_error(request, f"making the constraint's matcher failed: {type(e).__name__}: {e}")
            return False
        if request.finished:  # e.g. max_tokens reached by forced text alone
            self._finished_early.append(request)
        return True

    def budget_refusal(self, compiled, params: SamplingParams, num_prompt_tokens: int) -> str | None:
        """Why ``params`` leave too few tokens for any complete output under ``compiled`` (with
        ``budget_aware``), or None: the check ``add_request`` makes, for callers that answer before."""
        return self._budget_plan(compiled, params, num_prompt_tokens)[1]

    def _budget_plan(self, compiled, params: SamplingParams, num_prompt_tokens: int) -> tuple[bool, str | None]:
        """(steer the request's sequences, why its budget is refused or None)."""
        if not params.budget_aware or not hasattr(compiled, "matcher"):
            return False, None
        matcher = compiled.matcher()
        if not hasattr(matcher, "shortest_completion"):
            return False, None
        need, text = self.budget.start_need(matcher, self.config.fast_forward)
        if need is None:  # the bounded search gave up: generated as without steering
            logger.info("no shortest completion found for the constraint; its output is not steered")
            return False, None
        room = min(params.max_tokens, self.max_seq_len - num_prompt_tokens)
        if need <= room:
            return True, None
        shown = text.decode("utf-8", errors="replace")
        if len(shown) > 120:
            shown = shown[:117] + "..."
        limit = (f"max_tokens={params.max_tokens}" if room == params.max_tokens
                 else f"the {room} tokens the model length leaves after the prompt")  # fmt: skip
        return False, (
            f"{limit} is too small for this constraint: its shortest complete output takes {need} tokens "
            f"with EOS ({shown!r}); raise max_tokens, or set budget_aware to false to allow a cut output"
        )

    def _room(self, seq: Sequence) -> int:
        """The tokens ``seq`` may still generate."""
        return min(seq.params.max_tokens - seq.num_output_tokens, self.max_seq_len - seq.num_tokens)

    def _end_with_error(self, request: Request, message: str) -> None:
        request.error = message
        live = [s for s in request.seqs if not s.is_finished]
        self.scheduler.abort(live)
        for seq in live:
            seq.finish_reason = "error"

    def _admit_grammars(self) -> list[RequestOutput]:
        """Requests whose constraint finished compiling join the queue; failed ones end with the error."""
        failed = []
        for request_id, request in list(self.pending_grammars.items()):
            if not request.grammar.ready():
                continue
            del self.pending_grammars[request_id]
            try:
                compiled = request.grammar.result()
            except Exception as e:  # the compiler's error, reported on this request alone
                self._end_with_error(request, str(e) or type(e).__name__)
                failed.append(self._output(request))
                continue
            if not self._attach(request, compiled):
                failed.append(self._output(request))
        return failed

    def _check_prompt(self, ids: list[int]) -> None:
        if not ids:
            raise ConfigError("the prompt is empty (no tokens)")
        if len(ids) >= self.max_seq_len:
            raise ConfigError(
                f"the prompt has {len(ids)} tokens; at most {self.max_seq_len - 1} fit (max_model_len)"
            )
        if min(ids) < 0 or max(ids) >= self.vocab_size:
            raise ConfigError(f"prompt token ids must be in [0, {self.vocab_size})")

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is and free its blocks; False if it is unknown or already done."""
        request = self.requests.pop(str(request_id), None)
        if request is None:
            return False
        self.pending_grammars.pop(request.request_id, None)
        self.scheduler.abort([s for s in request.seqs if not s.is_finished])
        self._forget(request)
        return True

    def fail_request(self, request_id: str, message: str) -> RequestOutput | None:
        """End a request wherever it is with ``finish_reason == "error"`` and ``message`` (e.g. at
        shutdown); frees its blocks and returns its final output, or None if it is unknown."""
        request = self.requests.get(str(request_id))
        if request is None:
            return None
        self.pending_grammars.pop(request.request_id, None)
        self._end_with_error(request, message)
        return self._output(request)

    def set_decode_graphs(self, graphs) -> None:
        """Run decode steps through ``graphs`` (a ``DecodeGraphs``; None: eagerly), and cap decoding
        sequences' chunks at the longest chunk it takes."""
        self.runner.graphs = graphs
        usable = graphs is not None and (bool(graphs.graphs) or not graphs.capture)
        self.scheduler.max_decode_chunk = graphs.max_chunk if usable else None

    def close(self) -> None:
        """Stop what the engine started outside this process (tensor-parallel workers); the engine
        runs no step after it."""
        self.runner.close()

    def dead(self) -> str | None:
        """Why the engine cannot run another step (a tensor-parallel worker is gone), or None."""
        group = self.runner.group
        return None if group is None else group.dead

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self.pending_grammars) or bool(self._finished_early)

    def stats(self) -> dict:
        """Queue lengths, KV pool use, prefix-cache hit rate and preemptions, for metrics."""
        bm = self.block_manager
        return {
            "num_running": len(self.scheduler.running),
            "num_waiting": len(self.scheduler.waiting),
            "num_blocks": bm.num_blocks,
            "num_free_blocks": bm.num_free_blocks,
            "prefix_cache_hit_rate": bm.num_hit_tokens / max(bm.num_queried_tokens, 1),
            "num_preemptions": self.scheduler.num_preemptions,
            "num_pending_grammars": len(self.pending_grammars),
            "num_output_tokens": self.num_output_tokens,
            "num_forced_tokens": self.num_forced_tokens,
            "forced_fraction": self.num_forced_tokens / max(self.num_output_tokens, 1),
            # guided masks: rows filled, computed off the cache, held back a step (not ready in time), and
            # the engine thread's time spent waiting for / filling them
            "mask_rows_filled": self.grammar_masks.rows_filled,
            "mask_rows_computed": self.grammar_masks.rows_computed,
            "mask_rows_held": self.grammar_masks.rows_held,
            "mask_collect_s": self.grammar_masks.collect_s,
            # budget steering: sampled tokens checked, refused (resampled), rows ended by their completion
            "budget_tokens_checked": self.budget.tokens_checked,
            "budget_tokens_refused": self.budget.tokens_refused,
            "budget_rows_ended": self.budget.rows_ended,
            "budget_steer_s": self.budget.steer_s,
            # decode batch sizes with a captured CUDA graph (0: eager, on CPU or after a failed capture)
            "num_cuda_graphs": len(self.runner.graphs.graphs) if self.runner.graphs is not None else 0,
            # speculative decoding: draft tokens proposed and accepted, drafts checked
            "spec_draft_tokens": self.num_draft_tokens,
            "spec_accepted_tokens": self.num_accepted_tokens,
            "spec_draft_tokens_dropped": self.scheduler.num_draft_tokens_dropped,  # no room in the step left for them
            "spec_acceptance_rate": self.num_accepted_tokens / max(self.num_draft_tokens, 1),
            # tokens a checked draft gives per step: its accepted tokens, plus the one drawn after them
            "spec_mean_accepted_length": 1 + self.num_accepted_tokens / max(self.num_drafts_checked, 1),
            "spec_draft_s": self.draft_s,  # time spent drafting (a draft model's forward passes included)
        }

    # ------------------------------------------------------------------ one step
    def step(self) -> list[RequestOutput]:
        """Schedule and run one batch; return the outputs of the requests that advanced.

        Whatever goes wrong for one sequence in a phase of the step (scheduling, sampling inputs, its
        mask, sampling, accepting its token, stop checks, detokenizing, logprobs, fast-forward) ends
        that sequence alone with ``finish_reason == "error"``; the others go on unchanged.
        """
        outputs = self._admit_grammars() if self.pending_grammars else []
        if self._finished_early:
            outputs += [self._output(r) for r in self._finished_early if r.request_id in self.requests]
            self._finished_early.clear()
        batch = self.scheduler.schedule()
        touched: dict[str, Request] = {}
        self._fail_all(batch.failed, touched)
        masks = self.grammar_masks if self.bitmask_provider is None else None
        ready = masks.take_ready() if masks is not None else []  # held back earlier, mask ready now
        if not batch and not ready:
            if masks is not None and masks.held:
                masks.wait_for_held(GRAMMAR_POLL_S)  # only slow masks are in flight: do not spin
            elif self.pending_grammars and not outputs and not touched:
                time.sleep(GRAMMAR_POLL_S)  # only compiles are in flight: do not spin
            return outputs + [self._output(r) for r in touched.values()]
        if masks is not None:
            sampled = self._run(batch, ready)
        else:  # a custom provider: called while the forward pass runs, never held back
            sampled = self.runner.execute(batch, self.bitmask_provider)
            self._computed(batch)
        self._fail_all(sampled.failed, touched)
        now = time.perf_counter()
        drawn = [(s, t, lp, None) for s, t, lp in zip(sampled.seqs, sampled.token_ids, sampled.logprobs, strict=True)]
        for seq, token_id, logprobs, ending in drawn + [(s, None, None, e) for s, e in sampled.endings]:
            if seq.draft:
                self._emit_checked(seq, [(token_id, logprobs, ending, False), *self._checked.pop(seq.seq_id, [])])
            elif ending is not None:
                self._end_by_budget(seq, ending)
            else:
                self._advance(seq, token_id, logprobs)
            request = self.requests[seq.request_id]
            request.first_token_time = request.first_token_time or now
            if self.stream or seq.is_finished:
                touched[seq.request_id] = request
        self._checked.clear()
        for seq in batch.seqs:  # a draft is checked in the step that computed it, or dropped
            seq.drop_draft()
        if self.config.speculative is not None and masks is not None:
            self._propose([seq for seq, *_ in drawn])
        return outputs + [self._output(r) for r in touched.values() if self.stream or r.finished]

    # ------------------------------------------------------------------ speculative decoding
    def _propose(self, seqs: list[Sequence]) -> None:
        """Draft the tokens after each of ``seqs``' for the next step to check (engine.speculative), by
        prompt lookup or with the draft model (engine.draft_model)."""
        spec, items, switch = self.config.speculative, [], self.scheduler.rope_switch
        for seq in seqs:
            params = seq.params
            if seq.status is not SequenceStatus.RUNNING or not params.speculative or params.max_reasoning_tokens:
                continue
            k = min(spec.num_speculative_tokens, params.max_tokens - seq.num_output_tokens - 1,
                    self.max_seq_len - seq.num_tokens - 1)  # fmt: skip
            if switch is not None and not seq.rope_long:  # LongRoPE: rows past the switch take the long factors
                k = min(k, switch - seq.num_tokens)  # in plain decoding (its KV is recomputed there): none drafted
            if k > 0:
                items.append((seq, k))
        if not items:
            return
        start = time.perf_counter()
        try:  # a draft is only ever an optimisation: on an error, none this step
            if self.drafter is not None:
                drafts = self.drafter.propose(items, self.config.fast_forward, self.grammar_masks.words)
            else:
                drafts = {seq.seq_id: self._lookup(seq, k) for seq, k in items}
        except Exception:
            logger.exception("drafting failed for %d sequences", len(items))
            return
        finally:
            self.draft_s += time.perf_counter() - start
        for seq, _ in items:
            draft, states, bonus = drafts.get(seq.seq_id) or ([], [], False)
            seq.draft, seq.draft_states, seq.draft_bonus = draft, states, bonus
            self.num_draft_tokens += len(draft)

    def _lookup(self, seq: Sequence, k: int) -> tuple[list, list, bool]:
        """A prompt-lookup draft of ``seq``, cut by its grammar."""
        spec = self.config.speculative
        draft = propose(seq.token_ids, k, spec.prompt_lookup_max, spec.prompt_lookup_min)
        if draft and seq.constraint is not None:
            return grammar_cut(seq.constraint, draft, self.config.fast_forward)
        return draft, [None] * len(draft), True

    def _split_draft_rows(self, seqs: list[Sequence], logits: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The sequences' own rows of ``logits`` and, by sequence, the rows of its draft positions."""
        own, drafts, at = [], {}, 0
        for seq in seqs:
            own.append(at)
            if seq.draft:
                drafts[seq.seq_id] = logits[at + 1 : at + 1 + len(seq.draft)]
            at += 1 + len(seq.draft)
        return logits[torch.tensor(own, dtype=torch.long, device=logits.device)], drafts

    def _check_drafts(self, sampled: SampledTokens, drafts: dict) -> None:
        """Draw every draft row as plain decoding draws that position (``DraftRow``: the history, the
        matcher state and the sampling offset after the draft's prefix; the budget steers it the same
        way); the results wait in ``_checked`` for the step's emission."""
        rows, logits = [], []
        for seq in sampled.seqs:
            if not seq.draft or seq.seq_id not in drafts:
                continue
            used = len(seq.draft) if seq.draft_bonus else len(seq.draft) - 1
            mine = [DraftRow(seq, seq.draft[:i], seq.draft_states[i - 1]) for i in range(1, used + 1)]
            masks = self._draft_masks(mine)
            if masks is False:  # a mask failed: this draft is checked on its first token alone
                continue
            rows += [(row, mask) for row, mask in zip(mine, masks, strict=True)]
            logits.append(drafts[seq.seq_id][:used])
        if not rows:
            return
        proxies = [row for row, _ in rows]
        constrained = any(mask is not None for _, mask in rows)
        bitmask = torch.stack([m if m is not None else torch.zeros(self.grammar_masks.words, dtype=torch.int32)
                               for _, m in rows]) if constrained else None  # fmt: skip
        index = [i if m is not None else -1 for i, (_, m) in enumerate(rows)] if constrained else None
        logits = torch.cat(logits)
        out = self.runner.sample(proxies, logits, bitmask, index)
        if constrained and any(p.budget for p in proxies):
            self.budget.steer(out, proxies, logits, bitmask, index, self.runner.sample, self._room)
        results = {p.seq_id: (t, lp, None, p.budget_forced) for p, t, lp in zip(out.seqs, out.token_ids, out.logprobs,
                                                                              strict=True)}  # fmt: skip
        results.update({p.seq_id: (None, None, e, p.budget_forced) for p, e in out.endings})
        broken: set[int] = set()  # sequences with a row that failed: their later rows are not used
        for p in proxies:  # a sequence's rows in draft order
            base = p.base.seq_id
            if base in broken or p.seq_id not in results:
                broken.add(base)
                continue
            self._checked.setdefault(base, []).append(results[p.seq_id])

    def _draft_masks(self, rows: list[DraftRow]) -> list | bool:
        """Each row's mask (None: unconstrained), or False when a matcher raised."""
        masks = []
        for row in rows:
            if row.constraint is None:
                masks.append(None)
                continue
            mask = torch.empty((1, self.grammar_masks.words), dtype=torch.int32)
            try:
                row.constraint.fill_bitmask(mask.numpy(), 0)
            except Exception:
                logger.exception("request %s: a draft row's mask failed", row.request_id)
                return False
            masks.append(mask[0])
        return masks

    def _emit_checked(self, seq: Sequence, results: list[tuple]) -> None:
        """Append the drawn tokens of a checked draft: the first, and each next one while the one before
        equals the draft token at its position (whose KV this step computed); then what plain decoding
        appends after the last (forced tokens, a budget ending)."""
        draft = seq.draft
        seq.drop_draft()
        self.num_drafts_checked += 1
        for i, (token, logprobs, ending, budget_forced) in enumerate(results):
            if ending is not None:
                self._end_by_budget(seq, ending)
                break
            seq.budget_forced |= budget_forced
            position = seq.num_tokens
            self._advance(seq, token, logprobs)
            accepted = i < len(draft) and token == draft[i]
            self.num_accepted_tokens += accepted  # (an accepted end of sequence or last token too)
            if seq.is_finished or not accepted:
                break
            if seq.num_computed_tokens == position:  # the draft token's KV is this token's
                seq.num_computed_tokens += 1
        if not seq.is_finished:
            self.block_manager.cache_computed_blocks(seq)

    def _run(self, batch: ScheduledBatch, ready: list) -> SampledTokens:
        """Forward pass over ``batch`` while the workers compute masks not computed before; then sample
        every sequence whose mask is ready (``ready``: held back before, with their logits) and hold
        back those whose mask is not."""
        masks = self.grammar_masks
        masks.start(batch.to_sample())
        seqs, logits = self.runner.forward(batch) if batch else ([], None)
        logits_ready = self.runner.logits_ready()
        self._computed(batch)
        drafts = {}
        if logits is not None and any(s.draft for s in seqs):  # speculative: the draft positions' rows apart
            logits, drafts = self._split_draft_rows(seqs, logits)
        if ready:
            seqs = seqs + [s for s, _ in ready]
            held_rows = torch.stack([row for _, row in ready])
            logits = held_rows if logits is None else torch.cat([logits, held_rows])
        if not seqs:
            return SampledTokens()
        bitmask, rows, late = masks.collect(seqs, logits_ready)
        if late:
            for i in late:
                masks.hold(seqs[i], logits[i])
                seqs[i].drop_draft()  # it samples later, without its draft
            held = set(late)
            keep = [i for i in range(len(seqs)) if i not in held]
            seqs, rows = [seqs[i] for i in keep], [rows[i] for i in keep]
            logits = logits[torch.tensor(keep, dtype=torch.long, device=logits.device)]
        if not seqs:
            return SampledTokens()
        sampled = self.runner.sample(seqs, logits, bitmask, rows)
        if bitmask is not None and any(s.budget for s in seqs):
            self.budget.steer(sampled, seqs, logits, bitmask, rows, self.runner.sample, self._room)
        if drafts:
            self._check_drafts(sampled, drafts)
        return sampled

    def _computed(self, batch: ScheduledBatch) -> None:
        for seq, n in zip(batch.seqs, batch.num_tokens, strict=True):
            seq.num_computed_tokens += n - len(seq.draft)  # a draft's KV counts once its tokens are accepted
            self.block_manager.cache_computed_blocks(seq)

    def _advance(self, seq: Sequence, token_id: int, logprobs: dict[int, float] | None) -> None:
        """Append the sampled token, then what the grammar forces; an error ends this sequence alone."""
        try:
            self._append(seq, token_id, logprobs)
            if not seq.is_finished and self._reasoning_over(seq):  # the reasoning budget: its end, forced
                for marker_id in seq.params.reasoning_end_ids:
                    self._append(seq, marker_id, None, forced=True)
            if seq.constraint is not None and self.config.fast_forward and not seq.is_finished:
                self._fast_forward(seq)
        except Exception as e:
            logger.exception("request %s: processing its sampled token failed", seq.request_id)
            if not seq.is_finished:
                self._fail(seq, f"processing the sampled token failed: {type(e).__name__}: {e}")

    def _end_by_budget(self, seq: Sequence, ending: list[int]) -> None:
        """End ``seq`` with its shortest completion and EOS (forced tokens: no draw fitted the budget)."""
        try:
            for token_id in ending:
                self._append(seq, token_id, None, forced=True)
                if seq.is_finished:
                    break
        except Exception as e:
            logger.exception("request %s: appending its budget ending failed", seq.request_id)
            if not seq.is_finished:
                self._fail(seq, f"ending the output within its budget failed: {type(e).__name__}: {e}")

    def _fail_all(self, failed: list[tuple[Sequence, str]], touched: dict[str, Request]) -> None:
        for seq, message in failed:
            if not seq.is_finished:
                self._fail(seq, message)
            touched[seq.request_id] = self.requests[seq.request_id]

    def _fast_forward(self, seq: Sequence) -> None:
        """Append the tokens the grammar forces; the next step prefills them as one chunk."""
        try:
            forced = seq.constraint.forced_tokens()
        except GuidedError as e:  # a grammar limit ends this sequence alone
            self._fail(seq, str(e) or type(e).__name__)
            return
        except Exception as e:  # a bug in one matcher: still this sequence's alone
            logger.exception("request %s: forced tokens failed", seq.request_id)
            self._fail(seq, f"computing the forced tokens failed: {type(e).__name__}: {e}")
            return
        for token_id in forced:
            self._append(seq, token_id, None, forced=True)
            self.num_forced_tokens += 1
            if seq.is_finished:  # max_tokens or a stop string, checked on forced tokens too
                break

    def _append(
        self, seq: Sequence, token_id: int, logprobs: dict[int, float] | None, forced: bool = False
    ) -> None:
        matcher = seq.constraint
        if matcher is not None:
            failure = self.grammar_masks.failures.pop(seq.seq_id, None)
            if failure is not None:
                self._fail(seq, failure)
                return
            try:
                accepted = matcher.accept_token(token_id)
            except GuidedError as e:  # a grammar limit ends this sequence alone
                self._fail(seq, str(e) or type(e).__name__)
                return
            except Exception as e:  # a bug in one matcher: still this sequence's alone
                logger.exception("request %s: accepting token %d failed", seq.request_id, token_id)
                self._fail(seq, f"accepting token {token_id} failed: {type(e).__name__}: {e}")
                return
            if not accepted:  # the mask makes this impossible: say so loudly
                self._fail(
                    seq, f"sampled token {token_id} is outside the request's constraint (this is a bug)"
                )
                return
        seq.append_token(token_id)
        seq.forced.append(forced)
        self.num_output_tokens += 1
        if seq.logprobs is not None and (logprobs is not None or forced):
            # a forced token had no alternative under the constraint: probability 1
            seq.logprobs.append({token_id: 0.0} if forced else _top(logprobs, token_id, seq.params.logprobs))
        marker = seq.params.reasoning_end_ids
        if marker and not seq.reasoning_done and self._ends_with_marker(seq.output_token_ids, marker):
            seq.reasoning_done = True
        completion = self.completions[seq.seq_id]
        delta = completion.detokenize() if self.stream or seq.params.stop else ""
        reason = self._stop_reason(seq, completion, token_id, delta)
        if reason is None and matcher is not None and matcher.is_terminated():
            reason = "stop"  # the grammar ended (EOS accepted), even under ignore_eos
        if reason is not None:
            if not isinstance(seq.stop_reason, str):  # a stop string already cut the text
                completion.detokenize()
                completion.text += completion.detokenizer.flush()
            self.scheduler.finish(seq, reason)

    def _ends_with_marker(self, out: list[int], marker: list[int]) -> bool:
        """Whether ``out`` ends with the end-of-reasoning marker: its token ids, or its text however the
        model spelled it (``</`` ``think`` ``>``, ``f`` ``inal``: a grammar takes any spelling)."""
        if out[-len(marker) :] == marker:
            return True
        text = self._marker_texts.get(tuple(marker))
        if text is None:
            text = self._marker_texts[tuple(marker)] = self.tokenizer.decode(marker, skip_special_tokens=False)
        # every token spells at least one character: the marker's characters come from as many tokens at most
        return bool(text) and self.tokenizer.decode(out[-len(text) :], skip_special_tokens=False).endswith(text)

    def _reasoning_over(self, seq: Sequence) -> bool:
        """Whether ``seq`` spent ``max_reasoning_tokens`` without the end-of-reasoning marker and the
        marker may be appended now: its constraint takes it (not inside a character's bytes, say: a
        step later then) and, when steered, the token budget still fits after it."""
        p = seq.params
        if p.max_reasoning_tokens is None or seq.reasoning_done or seq.num_output_tokens < p.max_reasoning_tokens:
            return False
        marker, room, m = p.reasoning_end_ids, self._room(seq), seq.constraint
        if m is None:
            return len(marker) <= room
        probe = m.copy()
        if probe.accept_tokens(marker) != len(marker):
            return False
        need = self.budget.need(probe) if seq.budget else 0
        return need is not None and len(marker) + need <= room

    def _fail(self, seq: Sequence, message: str) -> None:
        """End one sequence with finish_reason "error"; its request reports ``message``."""
        request = self.requests[seq.request_id]
        request.error = message
        logger.error("request %s: %s", seq.request_id, message)
        self.scheduler.finish(seq, "error")

    def _stop_reason(self, seq: Sequence, c: Completion, token_id: int, delta: str) -> str | None:
        p = seq.params
        if seq.num_output_tokens >= p.min_tokens:  # before that, EOS and stop ids were masked
            if token_id in p.stop_token_ids:
                seq.stop_reason = token_id
                return "stop"
            if not p.ignore_eos and token_id in self.eos_token_ids:
                return "stop"
            if p.stop and delta and self._find_stop(seq, c, delta):
                return "stop"
        if seq.num_output_tokens >= p.max_tokens or seq.num_tokens >= self.max_seq_len:
            return "length"
        return None

    def _find_stop(self, seq: Sequence, c: Completion, delta: str) -> bool:
        start = max(0, len(c.text) - len(delta) - c.hold)
        hits = [(i, s) for s in seq.params.stop if (i := c.text.find(s, start)) >= 0]
        if not hits:
            return False
        i, stop = min(hits)
        c.text = c.text[: i + (len(stop) if seq.params.include_stop_str_in_output else 0)]
        seq.stop_reason = stop
        return True

    def _output(self, request: Request) -> RequestOutput:
        if request.finished:
            request.finish_time = time.perf_counter()
        output = request.output()
        if request.finished:
            self.requests.pop(request.request_id, None)
            self._forget(request)
        return output

    def _forget(self, request: Request) -> None:
        for seq in request.seqs:
            self.completions.pop(seq.seq_id, None)
            self.grammar_masks.forget(seq)
            if self.drafter is not None:
                self.drafter.forget(seq)


def _top(row: dict[int, float], token_id: int, k: int) -> dict[int, float]:
    """The sampled token's logprob first, then the top ``k`` alternatives."""
    out = {token_id: row[token_id]}
    for t, lp in list(row.items())[1 : k + 1]:
        out.setdefault(t, lp)
    return out


def eos_token_ids(config: Config, tokenizer) -> list[int]:
    """EOS ids of generation_config.json, config.json and the tokenizer, in that order, deduplicated."""
    ids: list[int] = []
    gen = Path(config.model) / "generation_config.json"
    sources = [json.loads(gen.read_text()).get("eos_token_id") if gen.is_file() else None,
               config.hf_config.get("eos_token_id"), getattr(tokenizer, "eos_token_id", None)]  # fmt: skip
    for value in sources:
        for i in value if isinstance(value, list) else [value]:
            if isinstance(i, int) and i not in ids:
                ids.append(i)
    return ids
