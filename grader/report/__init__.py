"""Debrief reports of interview sessions: ``data`` gathers what the store holds, ``plots`` draws
it (matplotlib, inline SVG), ``render`` lays it out as one self-contained HTML file or Markdown."""
