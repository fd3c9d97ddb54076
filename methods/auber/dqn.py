"""AUBER's per-layer DQN search: Q-network, replay memory, epsilon-greedy actions, optimisation, episodes (paper
§3.2, Algorithm 1; snudatalab/AUBER ``src/lib/agent.py``, ``src/lib/memory.py``, ``src/train.py``). See
docs/methods.md ("AUBER (Lee et al. 2020)")."""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

ScoreMany = Callable[[Sequence[frozenset]], list]
"""``score_many(pruned_sets) -> [score, ...]``: the mini-dev metric with each set of this layer's heads pruned."""


@dataclass(frozen=True)
class DQNConfig:
    """Hyper-parameters of one layer's DQN search; the defaults are the official code's.

    Attributes:
        hidden_size: width of the three hidden layers. replay_capacity: replay memory size.
        batch_size: transitions per optimisation step; no step before the memory holds this many.
        gamma: discount. lr, momentum: SGD. grad_clamp: gradients clamped to ``[-grad_clamp, grad_clamp]``.
        eps_start, eps_end, eps_decay: epsilon schedule (decay in steps, see :func:`epsilon`).
        target_update: the target network is copied after episodes ``e`` (0-based) with ``e % target_update == 0``.
        stop_q: the fixed Q-value of the stop action; learned_stop: use the network's output instead (ours).
        pruned_q: Q-value forced on already-pruned heads. reward_scale: reward = scale x change of the metric.
    """

    hidden_size: int = 512
    replay_capacity: int = 5000
    batch_size: int = 128
    gamma: float = 1.0
    lr: float = 0.03
    momentum: float = 0.9
    grad_clamp: float = 1.0
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_decay: float = 256.0
    target_update: int = 35
    stop_q: float = 0.2
    learned_stop: bool = False
    pruned_q: float = -5.0
    reward_scale: float = 100.0


class QNetwork(nn.Module):
    """The code's ``DQN``: ``H -> hidden -> hidden -> hidden -> H+1`` with LeakyReLU; pruned heads (state 0) get
    ``pruned_q`` and the stop action (last column) ``stop_q`` unless ``learned_stop``, with no gradient."""

    def __init__(self, num_heads: int, hidden_size: int = 512, *, stop_q: float = 0.2, learned_stop: bool = False,
                 pruned_q: float = -5.0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.fc1 = nn.Linear(num_heads, hidden_size)
        self.fc2 = nn.Linear(hidden_size, hidden_size)
        self.fc3 = nn.Linear(hidden_size, hidden_size)
        self.fc4 = nn.Linear(hidden_size, num_heads + 1)
        self.act = nn.LeakyReLU()
        self.stop_q, self.learned_stop, self.pruned_q = float(stop_q), bool(learned_stop), float(pruned_q)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """``state`` ``[B, H]`` -> Q-values ``[B, H+1]``."""
        raw = self.fc4(self.act(self.fc3(self.act(self.fc2(self.act(self.fc1(state)))))))
        pruned = torch.cat([state == 0, torch.zeros_like(state[:, :1], dtype=torch.bool)], dim=1)
        out = torch.where(pruned, torch.full_like(raw, self.pruned_q), raw)
        if not self.learned_stop:
            out = torch.cat([out[:, :-1], torch.full_like(out[:, -1:], self.stop_q)], dim=1)
        return out


@dataclass
class Transition:
    """One step: ``next_state`` is None after the stop action (terminal)."""

    state: torch.Tensor
    action: int
    next_state: torch.Tensor | None
    reward: float


class ReplayMemory:
    """Ring buffer of transitions with uniform sampling without replacement (the code's ``ReplayMemory``)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"auber: replay capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.memory: list[Transition] = []
        self.position = 0

    def push(self, transition: Transition) -> None:
        """Store ``transition``; when full, overwrite the oldest."""
        if len(self.memory) < self.capacity:
            self.memory.append(transition)
        else:
            self.memory[self.position] = transition
        self.position = (self.position + 1) % self.capacity

    def sample(self, k: int, rng: random.Random) -> list[Transition]:
        """``k`` distinct stored transitions drawn uniformly by ``rng``. Raises ValueError: ``k`` above ``len``."""
        return rng.sample(self.memory, k)

    def __len__(self) -> int:
        return len(self.memory)



DEFAULT_CONFIG = DQNConfig()

def epsilon(steps_done: int, cfg: DQNConfig = DEFAULT_CONFIG) -> float:
    """``eps_end + (eps_start - eps_end) * exp(-steps_done / eps_decay)`` (code ``select_action``)."""
    return cfg.eps_end + (cfg.eps_start - cfg.eps_end) * math.exp(-float(steps_done) / cfg.eps_decay)


def greedy_action(net: QNetwork, state: torch.Tensor, pruned: Sequence[int] = ()) -> int:
    """argmax of Q over the actions still allowed (unpruned heads and stop); the first index on ties."""
    with torch.no_grad():
        q = net(state.unsqueeze(0))[0].clone()
    if pruned:
        q[list(pruned)] = -math.inf
    return int(torch.argmax(q))


def select_action(net: QNetwork, state: torch.Tensor, pruned: Sequence[int], steps_done: int, rng: random.Random,
                  cfg: DQNConfig = DEFAULT_CONFIG) -> int:
    """Epsilon-greedy action: greedy with probability ``1 - eps``, else uniform over the H+1 actions (stop
    included), redrawn while it names a pruned head (code ``select_action``)."""
    num_actions = net.num_heads + 1
    if rng.random() > epsilon(steps_done, cfg):
        return greedy_action(net, state, pruned)
    action = rng.randrange(num_actions)
    while action in pruned:
        action = rng.randrange(num_actions)
    return action


def optimize(memory: ReplayMemory, policy: QNetwork, target: QNetwork, optimizer: torch.optim.Optimizer,
             rng: random.Random, cfg: DQNConfig = DEFAULT_CONFIG) -> float | None:
    """One step on the Huber loss between ``Q(s, a)`` and ``r + gamma * max_a' Q_target(s', a')`` (0 when
    terminal), gradients clamped, SGD (code ``optimize_model``). Returns the loss, or None with fewer than
    ``cfg.batch_size`` transitions stored (no update)."""
    if len(memory) < cfg.batch_size:
        return None
    batch = memory.sample(cfg.batch_size, rng)
    states = torch.stack([t.state for t in batch])
    actions = torch.tensor([[t.action] for t in batch], dtype=torch.long)
    rewards = torch.tensor([t.reward for t in batch], dtype=torch.float32)
    non_final = torch.tensor([t.next_state is not None for t in batch], dtype=torch.bool)
    next_values = torch.zeros(cfg.batch_size, dtype=torch.float32)
    if bool(non_final.any()):
        next_states = torch.stack([t.next_state for t in batch if t.next_state is not None])
        with torch.no_grad():
            next_values[non_final] = target(next_states).max(dim=1).values
    expected = next_values * cfg.gamma + rewards
    q_sa = policy(states).gather(1, actions)
    loss = F.smooth_l1_loss(q_sa, expected.unsqueeze(1))
    optimizer.zero_grad()
    loss.backward()
    for param in policy.parameters():
        if param.grad is not None:
            param.grad.clamp_(-cfg.grad_clamp, cfg.grad_clamp)
    optimizer.step()
    return float(loss.detach())


@dataclass
class Episode:
    """What one episode did: actions (stop last), the pruned-set scores, rewards, total reward."""

    actions: list[int]
    scores: list[float]
    rewards: list[float]
    total_reward: float
    loss: float | None
    forced_stop: bool


class LayerSearch:
    """The DQN search of one layer, with fresh networks, optimiser and replay memory (code ``train``).

    Args:
        initial_state: float32 ``[H]`` state of the unpruned layer (every entry > 0, else ValueError).
        original_score: the mini-dev score with none of this layer's heads pruned.
        seed: seeds the networks' initialisation (the global torch RNG is left untouched) and the
            ``random.Random`` of epsilon draws, random actions and replay sampling.

    Attributes (after :meth:`run`): ``steps_done``, ``episodes`` (:class:`Episode` list), ``target_syncs``
    (0-based episodes after which the target was updated), ``optim_steps``.
    """

    def __init__(self, initial_state: torch.Tensor, score_many: ScoreMany, original_score: float,
                 cfg: DQNConfig = DEFAULT_CONFIG, seed: int = 0) -> None:
        state = torch.as_tensor(initial_state, dtype=torch.float32).flatten().clone()
        if state.numel() < 1 or bool((state == 0).any()):
            raise ValueError("auber: the initial state must be non-empty with no zero entry (0 marks a pruned head)")
        self.state0 = state
        self.num_heads = state.numel()
        self.score_many = score_many
        self.original_score = float(original_score)
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            self.policy = QNetwork(self.num_heads, cfg.hidden_size, stop_q=cfg.stop_q,
                                   learned_stop=cfg.learned_stop, pruned_q=cfg.pruned_q)
            self.target = QNetwork(self.num_heads, cfg.hidden_size, stop_q=cfg.stop_q,
                                   learned_stop=cfg.learned_stop, pruned_q=cfg.pruned_q)
        self.target.load_state_dict(self.policy.state_dict())
        self.target.eval()
        self.optimizer = torch.optim.SGD(self.policy.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        self.memory = ReplayMemory(cfg.replay_capacity)
        self.rng = random.Random(int(seed))
        self.steps_done = 0
        self.episodes: list[Episode] = []
        self.target_syncs: list[int] = []
        self.optim_steps = 0

    @property
    def epsilon(self) -> float:
        """:func:`epsilon` after ``steps_done`` steps."""
        return epsilon(self.steps_done, self.cfg)

    def run_episode(self) -> Episode:
        """One episode (Algorithm 1's inner loop), one optimisation step, and the target update rule."""
        e = len(self.episodes)
        stop = self.num_heads
        state = self.state0.clone()
        pruned: list[int] = []
        actions: list[int] = []
        forced = False
        while True:
            if len(pruned) == self.num_heads - 1:
                action, forced = stop, True
            else:
                action = select_action(self.policy, state, pruned, self.steps_done, self.rng, self.cfg)
            self.steps_done += 1
            actions.append(action)
            if action == stop:
                break
            pruned.append(action)
            state = state.clone()
            state[action] = 0.0
        sets = [frozenset(pruned[: k + 1]) for k in range(len(pruned))]
        scores = [float(s) for s in self.score_many(sets)] if sets else []
        prev, state, rewards = self.original_score, self.state0.clone(), []
        for k, action in enumerate(actions):
            if action == stop:
                reward, next_state = 0.0, None
            else:
                next_state = state.clone()
                next_state[action] = 0.0
                reward = (scores[k] - prev) * self.cfg.reward_scale
                prev = scores[k]
            self.memory.push(Transition(state, action, next_state, reward))
            rewards.append(reward)
            state = next_state
        loss = optimize(self.memory, self.policy, self.target, self.optimizer, self.rng, self.cfg)
        if loss is not None:
            self.optim_steps += 1
        if e % self.cfg.target_update == 0:
            self.target.load_state_dict(self.policy.state_dict())
            self.target_syncs.append(e)
        episode = Episode(actions=actions, scores=scores, rewards=rewards, total_reward=float(sum(rewards)),
                          loss=loss, forced_stop=forced)
        self.episodes.append(episode)
        return episode

    def run(self, episodes: int) -> list[Episode]:
        """Run ``episodes`` more episodes; returns every episode run so far."""
        for _ in range(episodes):
            self.run_episode()
        return self.episodes

    def greedy(self) -> list[int]:
        """The greedy policy from the unpruned state: at most H-1 heads, in pruning order (code "VALIDATING")."""
        state = self.state0.clone()
        pruned: list[int] = []
        while len(pruned) < self.num_heads - 1:
            action = greedy_action(self.policy, state, pruned)
            if action == self.num_heads:
                break
            pruned.append(action)
            state = state.clone()
            state[action] = 0.0
        return pruned
