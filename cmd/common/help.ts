// --help wrapped to the terminal. Commander takes the width from
// process.stdout.columns (80 when not a TTY) but stops wrapping altogether when
// the description column would be narrower than 40; our longest flags leave
// 37 at 80 columns, so the server's help ran to ~380-character lines. In that
// case each description goes under its flag, indented, wrapped to the width.

import { Help, type Command } from 'commander';

/** Narrower than this, a description column beside the flags is not worth it. */
const NARROWEST_DESCRIPTION = 40;
const INDENT = '      ';

export function wrapHelpToTerminal(command: Command): Command {
  return command.configureHelp({
    formatItem(term: string, termWidth: number, description: string, helper: Help): string {
      const width = helper.helpWidth ?? 80;
      // Commander's layout: 2 spaces of indent, the term, 2 spaces, the description.
      if (description === '' || width - termWidth - 4 >= NARROWEST_DESCRIPTION) {
        return Help.prototype.formatItem.call(helper, term, termWidth, description, helper);
      }
      const lines = helper.boxWrap(description, width - INDENT.length).split('\n');
      return `  ${term}\n${lines.map((l) => INDENT + l).join('\n')}`;
    },
  });
}
