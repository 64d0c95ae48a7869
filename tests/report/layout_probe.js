// Measures an optmem HTML report as Chromium lays it out (tests/report/check_layout.py adds
// it to a copy of the page): elements whose content is wider than their box or that reach
// past the page, the SVG legends' text boxes, the breakdown bars' segments. It writes its
// findings as JSON into a pre element, id layout-report, that --dump-dom prints.
(function () {
  var res = {overflow: [], legends: [], bars: [], page: {}};
  function name(el) {
    var s = el.tagName.toLowerCase();
    if (el.id) s += '#' + el.id;
    if (el.getAttribute('class')) s += '.' + el.getAttribute('class').split(' ').join('.');
    return s;
  }
  var root = document.documentElement;
  res.page = {scrollWidth: root.scrollWidth, clientWidth: root.clientWidth};
  // A box that scrolls sideways by design (overflow-x auto or scroll) may hold wider
  // content: only the box itself must fit the page.
  function scrolls(el) {
    var x = getComputedStyle(el).overflowX;
    return x === 'auto' || x === 'scroll';
  }
  function inScroller(el) {
    for (var p = el.parentElement; p; p = p.parentElement)
      if (scrolls(p)) return true;
    return false;
  }
  document.querySelectorAll('body, body *').forEach(function (el) {
    if (el.closest('svg') && el.tagName.toLowerCase() !== 'svg') return;
    if (inScroller(el)) return;
    var r = el.getBoundingClientRect();
    var text = (el.textContent || '').slice(0, 100);
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1 && !scrolls(el))
      res.overflow.push({el: name(el), scrollWidth: el.scrollWidth,
                         clientWidth: el.clientWidth, text: text});
    else if (r.width > 0 && r.right > root.clientWidth + 1)
      res.overflow.push({el: name(el), right: r.right, page: root.clientWidth, text: text});
  });
  document.querySelectorAll('svg g.legend').forEach(function (g) {
    var el = g.closest('svg'), svg = el.getBoundingClientRect();
    // Text as drawn: a picture scaled to fit draws its font-size smaller.
    var vb = el.viewBox && el.viewBox.baseVal, scale = vb && vb.width ? svg.width / vb.width : 1;
    var boxes = [];
    g.querySelectorAll('text').forEach(function (t) {
      var b = t.getBoundingClientRect();
      boxes.push({text: t.textContent, left: b.left, right: b.right, top: b.top,
                  bottom: b.bottom, font: parseFloat(getComputedStyle(t).fontSize) * scale,
                  svg: [svg.left, svg.top, svg.right, svg.bottom]});
    });
    res.legends.push(boxes);
  });
  document.querySelectorAll('.bdbar').forEach(function (bar) {
    var b = bar.getBoundingClientRect(), segs = [];
    bar.querySelectorAll('span').forEach(function (s) {
      var r = s.getBoundingClientRect();
      segs.push({cls: s.getAttribute('class'), left: r.left, right: r.right, width: r.width});
    });
    res.bars.push({left: b.left + bar.clientLeft, right: b.left + bar.clientLeft + bar.clientWidth,
                   segments: segs});
  });
  var pre = document.createElement('pre');
  pre.id = 'layout-report';
  pre.textContent = JSON.stringify(res);
  document.body.appendChild(pre);
})();
