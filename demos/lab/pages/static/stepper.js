/* The backward stepper: each traced graph's backward.json steps, one node at a time.
   `root`: the page, or the one inline view (a notebook's output) these steppers are in. */
function num(x, digits) {  /* "nan", "inf" arrive as strings (strict JSON) */
  return typeof x === 'number' ? String(+x.toPrecision(digits)) : String(x);
}
function bytes(n) {
  return n < 1024 ? n + ' B' : n < 1048576 ? (n / 1024).toFixed(1) + ' KiB'
                                            : (n / 1048576).toFixed(1) + ' MiB';
}
/* "held for backward" after each step, as a small falling curve with the current step marked */
function heldCurve(steps, k) {
  var ns = 'http://www.w3.org/2000/svg', w = 160, h = 28, top = steps[0].held_before || 1;
  var svg = document.createElementNS(ns, 'svg'), line = document.createElementNS(ns, 'polyline');
  var points = [steps[0].held_before].concat(steps.map(function (s) { return s.held_after; }));
  svg.setAttribute('width', w); svg.setAttribute('height', h); svg.setAttribute('class', 'held');
  line.setAttribute('points', points.map(function (v, i) {
    return (i * (w - 4) / steps.length + 2) + ',' + (h - 2 - v * (h - 4) / top); }).join(' '));
  svg.appendChild(line);
  var dot = document.createElementNS(ns, 'circle');
  dot.setAttribute('cx', k * (w - 4) / steps.length + 2);
  dot.setAttribute('cy', h - 2 - points[k] * (h - 4) / top); dot.setAttribute('r', 3);
  svg.appendChild(dot);
  return svg;
}
function describeGrad(g) {
  if (g === null || g === undefined) return 'None';
  if (g.values) {
    var v = g.values.map(function (x) { return num(x, 6); });
    return g.shape.length ? '[' + v.join(', ') + ']' : v[0];
  }
  var shape = '(' + g.shape.join(', ') + (g.shape.length === 1 ? ',' : '') + ')';
  return shape + ' in [' + num(g.min, 4) + ', ' + num(g.max, 4) + '], norm ' + num(g.norm, 4);
}
var steppers = [];  /* this page's or view's: {box, step(d)}, for the arrow keys */
root.querySelectorAll('.backward').forEach(function (box) {
  if (box.dataset.ready) return;  /* once, should this script run twice over its view */
  box.dataset.ready = '1';
  var steps = JSON.parse(box.querySelector('script.steps').textContent);
  var svg = box.querySelector('svg'), detail = box.querySelector('.step-detail');
  var count = box.querySelector('.step-count'), play = box.querySelector('[data-action=play]');
  var nodes = {}, edges = {}, k = 0, timer = null;
  svg.querySelectorAll('g.node').forEach(function (g) {
    nodes[g.querySelector('title').textContent] = g; });
  svg.querySelectorAll('g.edge').forEach(function (g) {
    edges[g.querySelector('title').textContent] = g; });
  function mark(el, cls) { if (el) el.classList.add(cls); }
  function line(label, text) {
    var p = document.createElement('div'), b = document.createElement('b');
    b.textContent = label + ' '; p.appendChild(b);
    p.appendChild(document.createTextNode(text)); detail.appendChild(p);
  }
  function show() {
    svg.querySelectorAll('.active, .leaf-active').forEach(function (el) {
      el.classList.remove('active'); el.classList.remove('leaf-active'); });
    count.textContent = 'step ' + k + ' of ' + steps.length;
    detail.textContent = '';
    var kept = steps.length && steps[0].held_before !== undefined;
    if (k === 0) {
      line('', steps.length && steps[0].tangent !== undefined ?
           'Press Next to run the forward-mode pass one operation at a time.' :
           'Press Next to run backward one node at a time.');
      if (kept) {
        line('held for backward:', bytes(steps[0].held_before) + ' saved by the forward');
        detail.appendChild(heldCurve(steps, 0));
      }
      return;
    }
    var s = steps[k - 1];
    if (s.tangent !== undefined) {  /* forward mode: the value and the tangent pushed along */
      mark(nodes[s.dot_node], 'active');
      line('step ' + k + ':', s.node + (s.inputs.length ? ' of ' + s.inputs.join(', ') : ''));
      line('value:', describeGrad(s.primal));
      line('tangent:', describeGrad(s.tangent));
      if (s.result) {
        line('J·v (forward, one pass):', s.result.jv.join('; '));
        line('vᵀ·J (reverse, one backward):', Object.keys(s.result.vjp).map(function (n) {
          return n + ': ' + s.result.vjp[n]; }).join('; '));
        s.result.costs.forEach(function (c) { line('', c); });
      }
      return;
    }
    mark(nodes[s.dot_node], 'active');  /* and the edges a gradient really travels */
    if (nodes[s.dot_node]) reveal(nodes[s.dot_node]);
    s.sent.forEach(function (e) { if (e.dot_edge && e.grad) mark(edges[e.dot_edge], 'active'); });
    line('step ' + k + ':', s.node);
    if (s.pass) line('made by:', s.pass);  /* the second backward: which pass made the node */
    line('received:', s.received.map(describeGrad).join(', '));
    if (s.leaf && s.received[0] === null) {
      line('adds:', 'nothing (None arrived): ' + s.leaf.name + '.grad stays ' +
           describeGrad(s.leaf.grad));
    } else if (s.leaf) {
      mark(nodes[s.leaf.dot_node], 'leaf-active'); mark(edges[s.leaf.dot_edge], 'active');
      line('adds into:', s.leaf.name + '.grad, which is now ' + describeGrad(s.leaf.grad));
    } else {
      line('sends:', s.sent.map(function (e) {
        return e.to ? describeGrad(e.grad) + ' to ' + e.to
                    : describeGrad(e.grad) + ' for ' + e.input_name + ': carries nothing';
      }).join('; ') || 'nothing');
    }
    if (kept) {
      line('held for backward:', bytes(s.held_after) + (s.releases.length ?
           ' (it released ' + s.releases.join(', ') + ', ' + bytes(s.held_before) + ' before)'
           : ''));
      detail.appendChild(heldCurve(steps, k));
    }
  }
  function reveal(el) {  /* zoomed in: the lit node into its frame's view, the page still */
    var f = svg.parentNode, a = el.getBoundingClientRect(), b = f.getBoundingClientRect();
    if (a.top < b.top || a.bottom > b.bottom)
      f.scrollTop += (a.top + a.bottom - b.top - b.bottom) / 2;
    if (a.left < b.left || a.right > b.right)
      f.scrollLeft += (a.left + a.right - b.left - b.right) / 2;
  }
  function go(d) { k = Math.max(0, Math.min(steps.length, k + d)); show(); }
  function stop() { clearInterval(timer); timer = null; play.textContent = 'Play'; }
  box.querySelectorAll('button[data-action]').forEach(function (b) {
    b.addEventListener('click', function () {
      box.focus({preventScroll: true});
      if (b.dataset.action === 'prev') { stop(); go(-1); }
      else if (b.dataset.action === 'next') { stop(); go(1); }
      else if (timer) { stop(); }
      else {
        if (k >= steps.length) { k = 0; go(1); }  /* from the end: restart at once */
        play.textContent = 'Pause';
        timer = setInterval(function () { go(1); if (k >= steps.length) stop(); }, 900);
      }
    });
  });
  steppers.push({box: box, step: function (d) { stop(); go(d); }});
  show();
});
/* The arrow keys step the stepper that has the focus while half of it is in view; on a page
   (not in a notebook, whose arrows move between cells), without a click, the one most in
   view, which takes the focus. Taken at the window, before a notebook's own shortcuts see
   them (Notebook 7 binds the arrows in its capture phase); gone with the view. */
function inView(box) {  /* the share of the box on the screen (of the screen, for a tall one) */
  var r = box.getBoundingClientRect(), h = window.innerHeight;
  return Math.max(0, Math.min(r.bottom, h) - Math.max(r.top, 0)) /
         Math.max(1, Math.min(r.height, h));
}
function keys(ev) {
  var live = steppers.filter(function (s) { return s.box.isConnected; }), target = null;
  if (!live.length) { window.removeEventListener('keydown', keys, true); return; }
  var d = ev.key === 'ArrowRight' ? 1 : ev.key === 'ArrowLeft' ? -1 : 0;
  if (!d || ev.altKey || ev.ctrlKey || ev.metaKey || ev.shiftKey) return;
  live.forEach(function (s) {
    if (s.box.contains(document.activeElement) && (root !== document || inView(s.box) >= 0.5))
      target = s;
  });
  if (!target && root === document) {
    live.forEach(function (s) {
      if (inView(s.box) > (target ? inView(target.box) : 0)) target = s; });
    if (target) target.box.focus({preventScroll: true});
  }
  if (target) { target.step(d); ev.preventDefault(); ev.stopPropagation(); }
}
if (steppers.length) window.addEventListener('keydown', keys, true);
