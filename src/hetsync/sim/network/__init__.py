"""Fluid model of a cluster network with max–min fair bandwidth sharing.

Every node has an uplink and a downlink (bytes/s, ``inf`` for unlimited) and
a latency. A flow from ``src`` to ``dst`` crosses ``src``'s uplink and
``dst``'s downlink; the flows in transfer share links max–min fairly
(:mod:`hetsync.algos.maxmin`), re-shared whenever one starts or finishes its
bytes. A flow that has transferred its bytes leaves the sharing at once and is
*delivered* ``max(latency[src], latency[dst])`` later. A flow of zero bytes,
or one whose two links are both unlimited, is delivered after the latency
alone. This is the fluid flow model of SimGrid and similar simulators: no
packets, no slow start. The parameter server is a node like any other, so an
incast into it or a broadcast from it costs what its links allow.

Capacities may change in virtual time (``set_capacity``: background traffic
switched on and off on a worker's links, say): the flows transfer at the old
rates up to the change and share the links at the new capacities from then
on, as if the change were a flow start. A flow in transfer whose two links
become unlimited leaves the sharing then and is delivered its latency later;
one crossing a link of capacity 0 waits at rate 0 until it comes back. A
change updates the per-link state of the fast paths below just as a flow
start does, so they stay in use after it, with the same exactness.

Cost: the rates are recomputed whenever the set of flows in transfer has
changed, the next time the clock is read (flows started at one instant with
no look at the clock in between are shared once), but rarely by the full
progressive fill. The network keeps, per link, what the fill's first round
would decide; when that round settles every flow (always so in a parameter
server's star of equal workers, saturated or not) the rates are each flow's
smaller link share, cap / count, the very floats the fill returns. The flows
in transfer live in Python lists while they are few, in numpy arrays while
they are many, and then, in that one-round regime, grouped by a shared
bottleneck link whose share is their common rate and which keeps a virtual
clock (the bytes each of its flows has transferred), so that moving the
clock costs one addition per group and finding the next finish none.
Starting or finishing a flow, or changing a capacity, costs O(1) Python
work, O(log F) for the per-link bookkeeping and a few operations over the F
flows in transfer.
Deliveries waiting out their latency sit in a heap keyed by (delivery time,
start order), which is also the order ``advance`` reports them in. Nothing
depends on hashing or randomness: the same calls give bit-identical results.
The rates are bit for bit those of the full progressive fill over the flows
in the original implementation's order; so are the remaining bytes and the
finish times in the lists and arrays layouts, and within a few ulps of them
in the grouped one, where a flow's remaining bytes are its finish level less
the group's clock rather than its size less each step's bytes in turn (the
same deliveries, in the same order: tests/sim/test_network.py checks this,
tests/sim/test_network_capacity.py with capacity changes).

Where things live
-----------------

- :mod:`.core`: :class:`Network`, its public calls (``start_flow``,
  ``next_event_s``, ``advance``, ``set_capacity``), the clock (``_settle``)
  and the choice of layout at every re-share (``_reshare``: lists below
  _TO_ARRAYS flows, arrays from there, blocks when the one-round test
  holds and few flows would be loose).
- :mod:`.flows`: what every layout shares: the flows' slots and per-slot
  state, the clock's state, the done tolerances, the layout ids, the full
  progressive fill (the reference rates).
- :mod:`.oneround`: the one-round test, per-link bookkeeping kept at every
  flow start and finish that tells whether the rates are each flow's
  smaller link share (no progressive fill needed).
- :mod:`.lists`: the _LISTS layout (few flows, Python lists).
- :mod:`.flat`: the _FLAT layout (numpy arrays) and the switches between it
  and _LISTS.
- :mod:`.blocks`: the _BLOCKS layout (flows grouped by a shared bottleneck
  link with a virtual clock), its ``_Block`` and ``_Loose`` stores, and the
  switches between it and _FLAT.

Design: mixins, one per layout, over one state. ``Network`` is
``class Network(_ListsLayout, _BlocksLayout, _FlatLayout)``; each mixin
holds its layout's methods (``_start_X``, ``_reshare_X``,
``_move_remaining_X``, ``_finish_X``...), all building on
``_OneRoundTest`` and ``_Flows``, and ``core`` picks the method of the
current layout with the same ``if layout == ...`` tests as before. Not
composition (a regime object chosen at construction or per re-share),
because the layouts are not independent: a network switches between them
mid-run, converting the flows in place (lists to arrays, arrays to blocks
and back), every layout reads and writes the same slots, link counts and
shares, and the hot loops read that state as ``self._x``; a regime object
would need a reference back to the network for it, an attribute hop on
every hot access, and a hand-over of state at every switch. With mixins
the state stays on the one object (where the tests read it), the code is
the original's, moved, and the cost is that of the original: the same
attribute lookups, plus a method call or two per flow start and finish
where a layout's code used to be inline (within the noise when measured:
replays of recorded simulations' network calls ran at 0.96-1.03 times
the single module's time).
"""

from hetsync.sim.network.core import Network

__all__ = ["Network"]
