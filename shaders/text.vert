#version 330 core
// HUD text: one instance per character cell; `cell` = (column, row, glyph index).
layout(location = 0) in vec3 cell;
uniform vec2 origin;    // top-left of the text block, pixels
uniform vec2 advance;   // cell size, pixels
uniform vec2 viewport;  // window size, pixels
out vec2 glyph_uv;
flat out float glyph;
void main() {
  vec2 corner = vec2(gl_VertexID & 1, gl_VertexID >> 1);
  vec2 px = origin + (cell.xy + corner) * advance;
  gl_Position = vec4(px.x / viewport.x * 2.0 - 1.0, 1.0 - px.y / viewport.y * 2.0, 0.0, 1.0);
  glyph_uv = corner;
  glyph = cell.z;
}
