/* The zoom bar above each autograd graph: +, -, 100% and fit (tall graphs open fitted).
   `root`: the page, or the one inline view (a notebook's output) these bars are in. */
function natural(svg) {
  var box = svg.viewBox.baseVal;
  return box && box.width ? [box.width, box.height] : [svg.clientWidth, svg.clientHeight];
}
root.querySelectorAll('.zoom').forEach(function (bar) {
  var box = root.querySelector('[id="' + bar.dataset.target + '"]');
  if (!box || bar.dataset.ready) return;  /* once, should this script run twice */
  bar.dataset.ready = '1';
  var el = box.tagName === 'IMG' ? box : box.querySelector('svg'), scale = 1;
  if (!el) return;
  function size() { return el.tagName === 'IMG' ? [el.naturalWidth, el.naturalHeight]
                                                : natural(el); }
  function fit() {  /* the whole graph in view: tall graphs open fitted */
    var s = size(), holder = el.tagName === 'IMG' ? el.parentNode : box;
    if (holder.clientWidth < 8) return 1;  /* not laid out yet (a notebook's output) */
    return Math.min(1.5, (holder.clientWidth - 4) / s[0], 620 / s[1]);
  }
  function apply() {
    var s = size();
    el.style.width = (s[0] * scale) + 'px';
    if (el.tagName !== 'IMG') el.style.height = (s[1] * scale) + 'px';
  }
  if (el.tagName === 'IMG') {
    el.addEventListener('load', apply); if (el.complete) apply();
  } else {
    el.removeAttribute('width'); el.removeAttribute('height'); scale = fit(); apply();
    if (box.clientWidth < 8 && window.requestAnimationFrame) {  /* fitted once it is shown */
      requestAnimationFrame(function () { scale = fit(); apply(); });
    }
  }
  bar.querySelectorAll('button').forEach(function (b) {
    b.addEventListener('click', function () {
      scale = b.dataset.z === 'fit' ? fit() : b.dataset.z === '1' ? 1
            : scale * parseFloat(b.dataset.z);
      apply();
    });
  });
});
