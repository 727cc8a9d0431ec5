#version 330 core
// Samples the bitmap font (one row of 4x6 cells: 3x5 glyphs with a blank column and row)
// and draws its pixels opaque over a translucent dark cell background.
in vec2 glyph_uv;
flat in float glyph;
out vec4 color;
uniform sampler2D font;
uniform float glyphs;  // glyphs in the font texture
void main() {
  vec2 p = vec2((glyph + glyph_uv.x) / glyphs, glyph_uv.y);
  float on = texture(font, p).r;
  color = on > 0.5 ? vec4(1.0, 1.0, 0.85, 1.0) : vec4(0.0, 0.0, 0.0, 0.55);
}
